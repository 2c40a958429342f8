"""End a `dlas` command without tearing the interpreter down.

Why: after a sweep, Python's finalization frees every object the run left alive (the
trained models, TVM's loaded modules and its runtime, ONNX Runtime sessions, PyTorch's
thread pool) one by one. The process has nothing left to do by then, yet on a 2-vCPU
Zen 3 (2026-12-01) the quickstart's `dlas run` spent 3.8 s between its last line and
its exit, and a run that only timed (`--remeasure`) 1.4 s, against 0.15 s for a process
that had merely imported the same packages.

What a normal exit does that matters is kept, in CPython's order: the non-daemon threads
are joined (when one is still running, the normal exit is taken, so no work is cut
short), then the `atexit` functions run (`weakref.finalize` callbacks such as the shared
tuning database's clean-up, multiprocessing's children, logging's flush), then stdout
and stderr are flushed, and only the freeing of memory the kernel reclaims anyway is
skipped. Only the console entry points call this: `main()` itself returns its code, so
tests and embedding programs keep their interpreter.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def exit_now(code: int | None) -> None:
    """Exit with `code` (None: 0) after the exit work that matters, skipping the
    interpreter's teardown; a plain `sys.exit` where another non-daemon thread runs."""
    status = 0 if code is None else int(code)
    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon
           for t in threading.enumerate()):
        sys.exit(status)  # a thread still has work: Python's own exit joins it
    try:
        atexit._run_exitfuncs()  # noqa: SLF001 - the exit functions a normal exit runs
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a closed pipe or stream: nothing to flush to
                pass
        os._exit(status)
