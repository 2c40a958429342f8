"""The exclusive lock of a tuning-database directory, held across processes and nodes.

Several dlas processes (a sweep's Ray workers, two `dlas run`s on one workspace, nodes of
a cluster sharing the workspace over NFS) tune into the same target database. Its files
are read-modify-written (the ledger) or appended to (MetaSchedule's JSON tables), and
either loses or tears data when two writers overlap. So every write to the directory
happens under one exclusive `flock` on a sibling lock file, as `dlas.runner.claims`
locks stage entries:

* `flock` locks live in the kernel (on NFSv4, on the server, as byte-range locks) and
  are dropped when their holder dies, however it dies: a killed tuner never leaves the
  database locked (on NFS, once the server's lease for a dead client runs out);
* the lock file is never removed, unlike a claim file, so there is no window in which
  two processes lock two different files of the same name;
* acquiring the lock on NFS makes the client revalidate what it cached of the files, so
  the holder reads what the previous holder wrote (close-to-open consistency does the
  rest). A mount with `local_lock=flock` keeps `flock` on the node: such a workspace
  must not be shared across nodes.

Within one process the lock is reentrant and serialises threads: two `TuningDatabase`s
of one directory in one process (a hook's and a test's, say) must not deadlock on each
other's `flock`, which the kernel would treat as two owners.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: The lock file of a database directory (the ledger and the JSON tables share it).
LOCK_FILE = "dlas_db.lock"

#: A wait longer than this is logged at INFO (another node tunes into the database).
_SLOW_WAIT_S = 5.0

_guard = threading.Lock()
#: path -> (the thread lock that serialises this process's holders, flock fd, depth)
_locks: dict[str, threading.RLock] = {}
_held: dict[str, tuple[int, int]] = {}


def _forget_after_fork() -> None:
    """A forked child owns none of its parent's locks: it starts with none held (the
    inherited fds still name the parent's lock, which stays the parent's)."""
    global _guard
    _guard = threading.Lock()
    _locks.clear()
    _held.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def lock_path(directory: Path) -> Path:
    return Path(directory) / LOCK_FILE


@contextlib.contextmanager
def exclusive(directory: Path) -> Iterator[None]:
    """Hold the directory's exclusive lock for the block (waiting for other holders).
    Reentrant within a thread; other threads of the process wait as other processes do."""
    path = lock_path(directory)
    key = os.path.abspath(path)
    with _guard:
        thread_lock = _locks.setdefault(key, threading.RLock())
    with thread_lock:
        held = _held.get(key)
        if held is not None:  # this thread holds it already (a nested block)
            _held[key] = (held[0], held[1] + 1)
            try:
                yield
            finally:
                fd, depth = _held[key]
                _held[key] = (fd, depth - 1)
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            _acquire(fd, path)
            _held[key] = (fd, 1)
            try:
                yield
            finally:
                del _held[key]
        finally:
            os.close(fd)  # releases the flock


def _acquire(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    started = time.monotonic()
    fcntl.flock(fd, fcntl.LOCK_EX)
    waited = time.monotonic() - started
    if waited > _SLOW_WAIT_S:
        log.info("waited %.1f s for the tuning database lock %s", waited, path)
