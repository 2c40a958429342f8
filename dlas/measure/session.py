"""Where a compiled model runs while it is verified and timed: a measurement session.

* `LocalCPUSession`: this process, `tvm.cpu()`; threads set with `set_num_threads`.
* `LocalCUDASession`: this process, `tvm.cuda(0)`. TVM 0.27 libraries carry CUDA *source*
  that is compiled when the library is loaded, so loading selects a CUDA compiler
  (`dlas.compiler.gpu_schedule.cuda_compiler`).
* `RemoteSession`: a board reached through a TVM RPC tracker. The exported library (a
  `.so`, or a `.tar` of objects the board links itself) is uploaded, loaded as a Relax VM
  on the board's device, and run and timed there with the VM's `time_evaluator`, i.e. the
  same method as locally (repeat/number, warm-up discarded); only inputs and outputs
  cross the network. Threads: the RPC server runs each session in a fresh process whose
  TVM thread pool follows the board's own setting (TVM_NUM_THREADS where its rpc_server
  was started, else TVM's default). A target with explicit `threads` resizes that pool
  for the session with `runtime.config_threadpool` in TVM's "big cores" mode (the
  fastest cores first, which is what a big.LITTLE board such as the HiKey 970 wants).
  The pool size the board reports is what gets recorded.

Noise (`dlas.measure.load`, `dlas.measure.rounds`): a session says what watches the
machine while samples are taken. The local CPU session watches the other processes on
this machine's CPUs; the local GPU session does the same for its one host (dispatch)
thread; a board over RPC has no probe here, and its rounds are labelled "unknown".

Errors say what to do: an unreachable tracker names host:port and how to start one; no
free board within the request timeout names the key and what the tracker reports.
"""

from __future__ import annotations

import socket
import struct
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import tvm
from tvm import relax

from dlas.measure.load import CpuLoadProbe
from dlas.targets.base import RPCTracker, TargetSpec

#: TVM's ThreadPool mode: threads on the fastest ("big") cores first.
_BIG_CORES = 1
#: How long the first TCP connection to a tracker may take.
CONNECT_TIMEOUT_S = 10.0


class TrackerUnreachable(ConnectionError):
    """No RPC tracker answers at host:port."""


class NoFreeDevice(TimeoutError):
    """The tracker gave no board under the key within the request timeout."""


class Session(AbstractContextManager):
    """A device to load compiled models on; use as a context manager."""

    #: The device inputs are copied to and the VM runs on.
    device: Any

    def load(self, library: Path) -> relax.VirtualMachine:
        raise NotImplementedError

    def set_threads(self, num_threads: int | None) -> int | None:
        """Size the CPU thread pool (None: leave it); return its size, if known."""
        return None

    def threads_in_use(self) -> int | None:
        return None

    def load_probe(self) -> CpuLoadProbe | None:
        """What watches this machine for other work while samples are taken, if the
        measurement runs here at all."""
        return None

    def close(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalCPUSession(Session):
    """This process's CPU. `pin`: CPUs to pin the thread pool to, one per thread (the
    timing worker's choice, `dlas.measure.vm_timing.pinnable_cpus`); None lets threads float."""

    def __init__(self, pin: list[int] | None = None) -> None:
        self.device = tvm.cpu()
        self.pin = pin

    def load(self, library: Path) -> relax.VirtualMachine:
        from dlas.measure.vm_timing import load_vm

        return load_vm(library, self.device)

    def set_threads(self, num_threads: int | None) -> int | None:
        from dlas.measure.vm_timing import set_num_threads

        if not num_threads:
            return None
        pin = self.pin[:num_threads] if self.pin and len(self.pin) >= num_threads else None
        return set_num_threads(num_threads, pin=pin)

    def threads_in_use(self) -> int | None:
        from dlas.measure.vm_timing import num_threads_in_use

        return num_threads_in_use()

    def load_probe(self) -> CpuLoadProbe | None:
        return CpuLoadProbe(self.threads_in_use() or 1)


class LocalCUDASession(LocalCPUSession):
    """The GPU of this machine; the host side's threads are sized as on a CPU."""

    def __init__(self, device_id: int = 0) -> None:
        self.device = tvm.cuda(device_id)
        self.pin = None
        if not self.device.exist:
            raise RuntimeError("no CUDA GPU on this machine")

    def load(self, library: Path) -> relax.VirtualMachine:
        from dlas.compiler.gpu_schedule import cuda_compiler
        from dlas.measure.vm_timing import load_vm

        with cuda_compiler():  # the library's CUDA source is compiled now
            vm = load_vm(library, self.device)
        return vm

    def load_probe(self) -> CpuLoadProbe | None:
        return CpuLoadProbe(1)  # the host thread that launches the kernels


class RemoteSession(Session):
    """A board reached through an RPC tracker (see the module docstring)."""

    def __init__(self, tracker: RPCTracker, device: str = "cpu") -> None:
        self.tracker = tracker
        self.remote = request_session(tracker)
        self.device = self.remote.device(device, 0)

    def load(self, library: Path) -> relax.VirtualMachine:
        library = Path(library)
        self.remote.upload(str(library))
        return relax.VirtualMachine(self.remote.load_module(library.name), self.device)

    def set_threads(self, num_threads: int | None) -> int | None:
        if num_threads:
            self.remote.get_function("runtime.config_threadpool")(_BIG_CORES, num_threads)
        return self.threads_in_use()

    def threads_in_use(self) -> int | None:
        return int(self.remote.get_function("runtime.NumThreads")())

    def close(self) -> None:
        self.remote = None  # the RPC session ends when its last reference goes


def open_session(target: TargetSpec, pin: list[int] | None = None) -> Session:
    """The session that measures `target`: its board over RPC, else this machine (its
    CPU threads pinned to `pin` when given)."""
    if target.unmeasurable:
        raise RuntimeError(target.unmeasurable)
    if target.rpc is not None:
        return RemoteSession(target.rpc, target.device)
    if target.device == "cuda":
        return LocalCUDASession()
    if target.device != "cpu":
        raise ValueError(f"no local session for device '{target.device}'")
    return LocalCPUSession(pin)


# -- the tracker protocol, with the timeouts TVM's client leaves out ---------------------

def _tracker_socket(tracker: RPCTracker, timeout: float) -> socket.socket:
    """A TCP connection to the tracker that has passed its handshake.

    TVM's `connect_tracker` retries a refused connection for 60 s and `request` waits
    forever for a free board; here both have limits and say what to do.
    """
    from tvm.rpc import base

    where = f"{tracker.host}:{tracker.port}"
    try:
        sock = socket.create_connection((tracker.host, tracker.port), timeout=timeout)
    except OSError as err:
        raise TrackerUnreachable(
            f"no RPC tracker at {where} ({err}). Start one on that address (not "
            f"0.0.0.0: an open tracker runs anyone's code on the boards) with `python -m "
            f"tvm.exec.rpc_tracker --host {tracker.host} --port {tracker.port}` and register "
            f"the board with `python -m tvm.exec.rpc_server --tracker {where} --key "
            f"{tracker.key}` (see docs/targets.md, Security)") from err
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = struct.unpack("<i", base.recvall(sock, 4))[0]
    except OSError as err:
        sock.close()
        raise TrackerUnreachable(f"{where} did not answer as an RPC tracker ({err})") from err
    if magic != base.RPC_TRACKER_MAGIC:
        sock.close()
        raise TrackerUnreachable(f"{where} is not an RPC tracker")
    return sock


def tracker_summary(tracker: RPCTracker, timeout: float = CONNECT_TIMEOUT_S) -> dict:
    """The tracker's summary: `queue_info` (free/pending per key) and `server_info`."""
    from tvm.rpc import base

    sock = _tracker_socket(tracker, timeout)
    try:
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        value = base.recvjson(sock)
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"tracker summary failed: {value}")
    return value[1]


def _describe_queue(tracker: RPCTracker) -> str:
    """What the tracker says about `tracker.key`: its servers, free and pending counts."""
    try:
        summary = tracker_summary(tracker)
    except Exception as err:  # noqa: BLE001 - only for the message
        return f"the tracker's summary failed too ({err})"
    servers: dict[str, int] = {}
    for item in summary.get("server_info", []):
        key = str(item.get("key", "")).split(":", 1)[-1]  # "server:<key>"
        servers[key] = servers.get(key, 0) + 1
    if tracker.key not in servers:
        known = ", ".join(f"{k} ({n})" for k, n in sorted(servers.items())) or "none"
        return (f"no server registered under '{tracker.key}' (servers the tracker knows, "
                f"by key: {known})")
    queue = summary.get("queue_info", {}).get(tracker.key, {})
    return (f"{servers[tracker.key]} server(s) under '{tracker.key}', "
            f"{queue.get('free', 0)} free, {queue.get('pending', 0)} request(s) pending: "
            "all busy, or their sessions hang")


def request_session(tracker: RPCTracker, priority: int = 1) -> Any:
    """An RPC session on a board registered under `tracker.key`.

    Raises `TrackerUnreachable` or `NoFreeDevice` with what the tracker reports.
    """
    from tvm import rpc
    from tvm.rpc import base

    sock = _tracker_socket(tracker, min(CONNECT_TIMEOUT_S, tracker.request_timeout_s))
    try:
        sock.settimeout(tracker.request_timeout_s)
        base.sendjson(sock, [base.TrackerCode.REQUEST, tracker.key, "", priority])
        try:
            value = base.recvjson(sock)
        except TimeoutError as err:
            raise NoFreeDevice(
                f"no free device under key '{tracker.key}' at tracker "
                f"{tracker.host}:{tracker.port} within {tracker.request_timeout_s:g} s: "
                f"{_describe_queue(tracker)}. Start a server with `python -m "
                f"tvm.exec.rpc_server --tracker {tracker.host}:{tracker.port} --key "
                f"{tracker.key}` on the board") from err
    finally:
        sock.close()
    if value[0] != base.TrackerCode.SUCCESS:
        raise RuntimeError(f"tracker refused the request for '{tracker.key}': {value}")
    url, port, matchkey = value[1]
    return rpc.connect(url, port, matchkey, session_timeout=tracker.session_timeout_s)
