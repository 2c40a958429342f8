"""The machine lock: a timing never overlaps other dlas work on the same machine.

Every stage that computes takes the lock shared; a timing (a measure or baseline stage,
and a compile that tunes, which times its candidates) takes it exclusive. So a timing waits
for the training or compiling other dlas processes are doing, and new work waits while a
timing runs. A turnstile in front of the lock keeps a stream of shared holders from
starving a timing: a process that wants the lock exclusive holds the turnstile while it
waits, and new shared holders queue on it.

The lock files live in one folder per machine (`DLAS_LOCK_DIR`, default
`<tmp>/dlas-locks`), shared by all workspaces and users. Locks are `flock`s, released by
the kernel when a holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dlas.runner.claims import POLL_S
from dlas.stages.base import Resources


def lock_dir() -> Path:
    configured = os.environ.get("DLAS_LOCK_DIR")
    return _shared_dir(Path(configured) if configured
                       else Path(tempfile.gettempdir()) / "dlas-locks")


def _shared_dir(path: Path) -> Path:
    """The lock directory, made on first use whoever names it (the default, the
    environment or a caller), so a fresh machine or a fresh test never lacks it."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):
            path.chmod(0o1777)  # every user's dlas shares the machine
    return path


def _open(path: Path) -> int:
    # read-only: flock needs no write access, so another user's lock file serves too
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o666)
    return fd


def _wait_lock(fd: int, op: int, on_wait: Callable[[], None] | None) -> None:
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        if on_wait is not None:
            on_wait()
    while True:
        time.sleep(POLL_S)
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


class MachineLock:
    """Shared for work, exclusive for timings (see the module doc)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = _shared_dir(Path(directory)) if directory else lock_dir()
        #: Holds of this object in progress: a stage computing an upstream entry it
        #: found missing is already covered by the outer hold (locking again through a
        #: second descriptor would wait for ourselves).
        self._depth = 0

    @contextlib.contextmanager
    def hold(self, resources: Resources,
             waiting: Callable[[str], None] | None = None) -> Iterator[None]:
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        exclusive = resources.exclusive
        turnstile = _open(self.directory / "turnstile.lock")
        main = _open(self.directory / "machine.lock")
        try:
            what = ("other dlas work on this machine to finish before timing" if exclusive
                    else "a timing by another dlas process on this machine")
            told: list[bool] = []

            def say() -> None:  # once per hold, whichever lock it waits on
                if waiting is not None and not told:
                    told.append(True)
                    waiting(what)

            _wait_lock(turnstile, fcntl.LOCK_EX, say)
            try:
                _wait_lock(main, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, say)
            finally:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0
        finally:
            os.close(main)
            os.close(turnstile)
