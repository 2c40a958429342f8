"""SIGTERM, what batch schedulers (Slurm, Kubernetes), `timeout` and `kill` send, handled
like Ctrl-C for a whole `dlas` command.

Python turns Ctrl-C (SIGINT) into KeyboardInterrupt, and every stage stops cleanly on it:
the entry being written is dropped, claims and locks are released, completed stages stay
cached, and `dlas run` ends with exit 130 and "run the same command again to resume".
SIGTERM's default action instead ends the process on the spot, without a word, and leaves
its child processes (MetaSchedule builder pools, timing workers) running; only training
escaped that, because Lightning installs a SIGTERM handler of its own. `sigterm_as_interrupt`
gives SIGTERM the KeyboardInterrupt path in every stage, and `Interrupts.stop_children` ends
the child processes a command started and left behind when it was interrupted.

This lives at the process level, not in any stage, so a stage (or a new timing worker) gets
it without doing anything. As with Ctrl-C, Python handles the signal between bytecodes of
the main thread: a long call into native code (an LLVM build, a batch of timed runs)
finishes first. SIGTERM that was ignored when the process started (SIG_IGN, inherited on
purpose) stays ignored, and a handler someone else installed is left alone.

Libraries do not always let the KeyboardInterrupt through: raised in a Python callback
that TVM's C++ called (MetaSchedule's builder, during tuning), it comes back as a
`RuntimeError`, which made the point a recorded *failure* (skipped by later runs) instead
of an interruption. So the handler also remembers the signal (Ctrl-C's too, where Python's
own handler was in place), and `interrupted()` tells the executor that whatever a stage
raised or returned after it is an interruption, not a result (`dlas.runner.executor`).

Worse, in a MetaSchedule tuning session (C++ that calls Python back throughout: builder,
runner, cost model), the KeyboardInterrupt sometimes meets a C++ frame that cannot pass it
on, and TVM's FFI calls `std::terminate`: exit 139, no message (seen with Ctrl-C as with
SIGTERM, about one time in three here). There the handler does not raise: it says what
happened, stops the child processes and ends the process at once with exit 130
(`os._exit`). That is safe for the record by design: cache entries are published by one
rename, claims and machine locks are `flock`s the kernel drops, a half-written `.tmp-*`
entry is removed by the next run, and the tuning database keeps the trials measured so
far, so the same command resumes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import NoReturn

import psutil

#: Exit status of a command stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells say).
INTERRUPTED = 130
#: Seconds children get to exit after SIGTERM before they are killed.
CHILD_GRACE_S = 3.0
#: Where Python runs under TVM C++ that cannot always pass a KeyboardInterrupt on: a frame
#: of one of these packages on the stack means a MetaSchedule session is running.
NATIVE_DRIVEN = (f"{os.sep}meta_schedule{os.sep}",)
#: What an interrupted command says (the sweep's summary says the same).
MESSAGE = "interrupted: completed stages are cached; run the same command again to resume"


def _in_native_driven_code(frame: FrameType | None) -> bool:
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in NATIVE_DRIVEN):
            return True
        frame = frame.f_back
    return False


def _children() -> dict[int, float]:
    """This process's descendants: pid -> start time (a pid alone can be reused)."""
    found = {}
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            found[child.pid] = child.create_time()
    return found


@dataclass
class Interrupts:
    """What `sigterm_as_interrupt` saw: the signal that interrupted the command, if any,
    and the child processes that existed before it (those are not the command's)."""

    installed: bool = False
    received: str | None = None
    _before: dict[int, float] = field(default_factory=dict)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
        if _in_native_driven_code(frame):
            self._exit_now()
        raise KeyboardInterrupt(self.received)

    def _exit_now(self) -> NoReturn:
        """End the process at once, cleanly (see the module doc), where raising could
        make TVM terminate it."""
        with contextlib.suppress(Exception):  # the main thread may be mid-write
            sys.stdout.flush()
        said = (f"\n{MESSAGE}\n(stopped by {self.received} during MetaSchedule tuning, which "
                "cannot be unwound safely: the process ends here; the tuning database keeps "
                "the trials measured so far)\n")
        with contextlib.suppress(OSError):
            os.write(sys.__stdout__.fileno() if sys.__stdout__ else 1, said.encode())
        with contextlib.suppress(Exception):
            self.stop_children()
        os._exit(INTERRUPTED)

    def stop_children(self, grace_s: float = CHILD_GRACE_S) -> list[int]:
        """Terminate the descendants started since the command began (SIGTERM, then
        SIGKILL for those still alive after `grace_s`); returns their pids. Called after
        an interrupt: the stages' own clean-up has run, so whatever is left would only
        linger (and keep CPUs busy under the next run's timings)."""
        procs = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if self._before.get(child.pid) != child.create_time():
                    procs.append(child)
        if not procs:
            return []
        # a second SIGTERM must not break off the clean-up half-way
        previous = signal.getsignal(signal.SIGTERM) if self.installed else None
        if self.installed:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    proc.terminate()
            _, alive = psutil.wait_procs(procs, timeout=grace_s)
            for proc in alive:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(alive, timeout=grace_s)
        finally:
            if self.installed:
                signal.signal(signal.SIGTERM, previous)
        return [p.pid for p in procs]


#: The command's `Interrupts` while `sigterm_as_interrupt` is active (one per process).
_active: Interrupts | None = None


def interrupted() -> str | None:
    """The signal ('SIGTERM', 'SIGINT') that interrupted the running command, or None (also
    outside a command, e.g. a runner used as a library)."""
    return _active.received if _active is not None else None


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[Interrupts]:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C
    does, and both are remembered (`interrupted`); the previous handlers are restored on
    exit. Off the main thread (where Python allows no handler), or for a signal with
    another disposition than its default (SIG_DFL for SIGTERM, Python's KeyboardInterrupt
    handler for SIGINT; an ignored SIGINT stays ignored), nothing is installed, and
    `installed` says whether SIGTERM's handler was."""
    global _active
    interrupts = Interrupts(_before=_children())
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    defaults = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}
    previous = {}
    for signum, default in defaults.items():
        if signal.getsignal(signum) is default:
            previous[signum] = signal.signal(signum, interrupts._handle)
    interrupts.installed = signal.SIGTERM in previous
    outer, _active = _active, interrupts
    try:
        yield interrupts
    finally:
        _active = outer
        for signum, handler in previous.items():
            signal.signal(signum, handler)
