"""Claims on stage entries: any number of dlas processes on one workspace compute each
entry once.

Before computing an entry a process takes its claim, an exclusive `flock` on
`<cache>/<stage>/.claim-<key>`. Another process that needs the same entry waits for the
claim and then finds the entry stored, so it loads it instead of computing it again. The
kernel drops a lock when its holder dies, however it dies, so the claim of a killed
process expires with it (on NFS, when the server's lease for the dead client runs out);
the next process takes the claim and computes the entry from scratch (training from its
last checkpoint).

The claim file holds who has it (host, pid, since when), so a waiter can say what it waits
for. It is removed on release; a waiter that got the lock on a file that was removed
meanwhile retries on the new one, so two processes never both hold a claim.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: Seconds between attempts while waiting for a claim (or a machine lock).
POLL_S = 0.25


@dataclass(frozen=True)
class Holder:
    """Who holds a claim, as its file says."""

    host: str
    pid: int
    since: float

    def describe(self) -> str:
        held = time.time() - self.since
        return f"pid {self.pid} on {self.host}, for {held:.0f} s"


def this_holder() -> Holder:
    return Holder(host=socket.gethostname(), pid=os.getpid(), since=time.time())


def _read_holder(fd: int) -> Holder | None:
    try:
        raw = os.pread(fd, 4096, 0)
        data = json.loads(raw) if raw else None
        return Holder(str(data["host"]), int(data["pid"]), float(data["since"])) if data else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def try_lock(path: Path) -> int | None:
    """An fd holding the exclusive lock of `path`, or None if another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if _same_file(fd, path):
            return fd
        os.close(fd)  # released and removed while we were locking it: lock the new one


def holder_of(path: Path) -> Holder | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return _read_holder(fd)
    finally:
        os.close(fd)


@dataclass
class Claim:
    """A held claim (`Claims.try_hold`); `release` it when the entry is stored."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            Claims._release(self.path, self.fd)
            self.fd = -1

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Claims:
    """The claim files of one cache."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / f".claim-{key}"

    def is_held(self, stage: str, key: str) -> bool:
        """Whether some live process holds the entry's claim (probes without waiting)."""
        fd = try_lock(self.path(stage, key))
        if fd is None:
            return True
        self._release(self.path(stage, key), fd)
        return False

    def try_hold(self, stage: str, key: str) -> Claim | None:
        """The entry's claim if no other process holds it, else None (without waiting):
        how a process moves on to other work instead of queueing behind another."""
        path = self.path(stage, key)
        fd = try_lock(path)
        if fd is None:
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(this_holder().__dict__).encode(), 0)
        return Claim(path, fd)

    def prune(self) -> int:
        """Remove the claim files no live process holds: a holder killed between storing
        its entry and releasing leaves one, and no later process, which finds the entry
        stored, ever takes it. Removed while locked, as `release` does, so a process
        locking the same file meanwhile retries on a new one. Returns how many went."""
        removed = 0
        for path in self.root.glob("*/.claim-*"):
            fd = try_lock(path)
            if fd is not None:
                self._release(path, fd)
                removed += 1
        return removed

    def holder(self, stage: str, key: str) -> Holder | None:
        return holder_of(self.path(stage, key))

    @contextlib.contextmanager
    def hold(self, stage: str, key: str,
             waiting: Callable[[Holder | None], None] | None = None) -> Iterator[None]:
        """Hold the entry's claim for the block, waiting while another process holds it;
        `waiting(holder)` is called once when that happens."""
        path = self.path(stage, key)
        fd = try_lock(path)
        told = False
        while fd is None:
            if not told and waiting is not None:
                waiting(holder_of(path))
                told = True
            time.sleep(POLL_S)
            fd = try_lock(path)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(this_holder().__dict__).encode(), 0)
            yield
        finally:
            self._release(path, fd)

    @staticmethod
    def _release(path: Path, fd: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # while still locked: a waiter then retries on a new file
        os.close(fd)
