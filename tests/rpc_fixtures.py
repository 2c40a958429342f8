"""A real TVM RPC tracker and server on loopback, for tests that measure or tune remotely.

Use from a test module with `from tests.rpc_fixtures import rpc_board  # noqa: F401`
(and `rpc_tracker_only` for a tracker with no server behind it). `rpc_board` yields an
`RPCBoard(host, port, key)`, a tuple: `host, port, key = rpc_board`. The processes run
for the whole test session and are stopped (process group, by id) at its end.

The server gets TVM_NUM_THREADS=1, as a board's own setting would be, so remote timings
do not compete with the test process for this machine's cores.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import NamedTuple

import pytest

LOOPBACK = "127.0.0.1"
KEY = "dlas-test-board"
START_TIMEOUT_S = 60.0


class RPCBoard(NamedTuple):
    host: str
    port: int
    key: str


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _start(args: list[str], log_name: str, env: dict[str, str] | None = None
           ) -> subprocess.Popen:
    log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), log_name), "wb")  # noqa: SIM115
    return subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """Stop the process and the session workers it forked (its own process group)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


def _wait(what: str, ready, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not start within {START_TIMEOUT_S:g} s")


def start_tracker() -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = _start(["tvm.exec.rpc_tracker", "--host", LOOPBACK, "--port", str(port),
                   "--port-end", str(port + 1), "--silent"], f"dlas-rpc-tracker-{port}.log")

    def ready() -> bool:
        from dlas.measure.session import tracker_summary
        from dlas.targets.base import RPCTracker

        tracker_summary(RPCTracker(LOOPBACK, port, KEY), timeout=1.0)
        return True

    _wait("rpc_tracker", ready, proc)
    return proc, port


def start_server(tracker_port: int, key: str) -> subprocess.Popen:
    port = free_port()
    proc = _start(["tvm.exec.rpc_server", "--tracker", f"{LOOPBACK}:{tracker_port}",
                   "--key", key, "--host", LOOPBACK, "--port", str(port),
                   "--port-end", str(port + 20), "--silent"],
                  f"dlas-rpc-server-{port}.log", env={"TVM_NUM_THREADS": "1"})

    def ready() -> bool:
        from dlas.measure.session import tracker_summary
        from dlas.targets.base import RPCTracker

        queue = tracker_summary(RPCTracker(LOOPBACK, tracker_port, key), timeout=1.0)
        return queue["queue_info"].get(key, {}).get("free", 0) > 0

    _wait("rpc_server", ready, proc)
    return proc


@pytest.fixture(scope="session")
def rpc_board() -> Iterator[RPCBoard]:
    """A loopback tracker with one rpc_server registered under `KEY`."""
    tracker, port = start_tracker()
    try:
        server = start_server(port, KEY)
        try:
            yield RPCBoard(LOOPBACK, port, KEY)
        finally:
            _stop(server)
    finally:
        _stop(tracker)


@pytest.fixture(scope="session")
def rpc_tracker_only() -> Iterator[RPCBoard]:
    """A loopback tracker with no server: every request for its key waits in vain."""
    tracker, port = start_tracker()
    try:
        yield RPCBoard(LOOPBACK, port, "dlas-test-no-board")
    finally:
        _stop(tracker)
