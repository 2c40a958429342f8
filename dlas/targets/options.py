"""The targets dlas ships (layer 6): `host`, `llvm` (any CPU LLVM knows), `cuda`, and
`remote` (any of them on a board reached through a TVM RPC tracker). See docs/targets.md.

A target that cannot run on this machine (another CPU architecture, CUDA without a GPU)
is still compiled; its `TargetSpec.unmeasurable` says why it is not measured, and its
points are recorded as `not_runnable` with that reason.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from dlas.registry import Option, register
from dlas.targets.arch import TRIPLES, machine_arch, normalize_arch
from dlas.targets.base import RPCTracker, TargetSpec
from dlas.targets.llvm_check import check_cuda_arch, check_mattr, check_mcpu


class HostParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threads: int | None = Field(None, ge=1, description="worker threads (default: all cores)")
    mcpu: str | None = Field(None, description="override the detected LLVM -mcpu")

    @field_validator("mcpu")
    @classmethod
    def _known_mcpu(cls, value: str | None) -> str | None:
        # the same check as `llvm`'s: LLVM itself would only warn and build generic code
        return None if value is None else check_mcpu(value, _triple(machine_arch()))


@register("targets", "host", params=HostParams,
          description="this machine's CPU as an LLVM target, -mcpu and cores detected")
def host(params: HostParams) -> TargetSpec:
    from dlas.targets.host import detect_host_cpu, host_target, why_not_runnable_here

    cpu = detect_host_cpu()
    threads = params.threads or cpu["cores"]
    target = host_target(num_threads=threads)
    unmeasurable = None
    if params.mcpu:
        target = {**target, "mcpu": params.mcpu}
        unmeasurable = why_not_runnable_here(params.mcpu, cpu=cpu)
    return TargetSpec(name="host", tvm_target=target, device="cpu", num_threads=threads,
                      fingerprint={"cpu": cpu.get("model")}, unmeasurable=unmeasurable)


# -- explicit LLVM CPU targets -----------------------------------------------------------

def _nearest(value: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(value, valid, n=1, cutoff=0.5)
    return f" Did you mean '{near[0]}'?" if near else ""


class LLVMParams(BaseModel):
    """A CPU as an LLVM target; also the `host` of `cuda` and the board of `remote`."""

    model_config = ConfigDict(extra="forbid")
    arch: str | None = Field(
        None, description=f"CPU architecture: {', '.join(TRIPLES)} (default: this machine's)")
    mcpu: str | None = Field(
        None, description="LLVM -mcpu (default: detected for this machine's arch, else "
                          "'generic')")
    mattr: list[str] = Field(
        default_factory=list, description="LLVM -mattr features, e.g. ['+neon'] "
                                          "(aarch64 always gets +neon)")
    threads: int | None = Field(
        None, ge=1, description="runtime worker threads (default: all cores when this "
                                "machine runs it, else the board's own default)")
    num_cores: int | None = Field(
        None, ge=1, description="num-cores the compiler plans for (default: threads)")

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: str | None) -> str | None:
        if value is None:
            return None
        arch = normalize_arch(value)
        if arch not in TRIPLES:
            raise ValueError(f"unknown arch '{value}'.{_nearest(arch, list(TRIPLES))} "
                             f"Valid archs: {', '.join(TRIPLES)}")
        return arch

    @field_validator("mcpu")
    @classmethod
    def _known_mcpu(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or "arch" not in info.data:  # a bad arch is reported already
            return value
        return check_mcpu(value, _triple(info.data["arch"] or machine_arch()))

    @field_validator("mattr")
    @classmethod
    def _known_features(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if "arch" not in info.data:
            return value
        return check_mattr(value, _triple(info.data["arch"] or machine_arch()))

    @property
    def resolved_arch(self) -> str:
        return self.arch or machine_arch()


def _triple(arch: str) -> str:
    return TRIPLES.get(arch, f"{arch}-linux-gnu")


def llvm_spec(params: LLVMParams, *, board: bool = False) -> TargetSpec:
    """The TargetSpec of an LLVM CPU target (see `LLVMParams`).

    `board`: the CPU is a remote board's, so nothing is detected from this machine (its
    mcpu and core count say nothing about the board; mcpu defaults to 'generic').
    """
    from dlas.targets.host import detect_host_cpu, why_not_runnable_here

    arch = params.resolved_arch
    here = arch == machine_arch() and not board
    cpu = detect_host_cpu() if here else None
    target: dict[str, Any] = {"kind": "llvm"}
    if arch != machine_arch() or arch == "aarch64":  # as `host` does on an Arm machine
        target["mtriple"] = _triple(arch)
    target["mcpu"] = params.mcpu or (cpu["mcpu"] if cpu else "generic")
    mattr = list(params.mattr)
    if arch == "aarch64" and "+neon" not in mattr:
        mattr.append("+neon")
    if mattr:
        target["mattr"] = mattr
    threads = params.threads or (cpu["cores"] if cpu else None)
    cores = params.num_cores or threads
    if cores:
        target["num-cores"] = cores
    unmeasurable = None if board else (
        why_not_runnable_here(target["mcpu"], mattr, cpu) if here and cpu else
        f"{arch} code cannot run on this {machine_arch()} machine; measure it on a board "
        "through the `remote` target")
    return TargetSpec(
        name="llvm", tvm_target=target, device="cpu", num_threads=threads,
        fingerprint={"arch": arch, "cpu": cpu["model"] if cpu else None},
        unmeasurable=unmeasurable)


@register("targets", "llvm", params=LLVMParams,
          description="a CPU via LLVM: arch (x86_64, aarch64), mcpu, mattr, threads")
def llvm(params: LLVMParams) -> TargetSpec:
    return llvm_spec(params)


# -- CUDA GPUs ---------------------------------------------------------------------------

#: The GPU arch a CUDA target compiles for when no GPU is here to ask (A100).
DEFAULT_CUDA_ARCH = "sm_80"
NO_GPU = "no CUDA GPU on this machine"
#: Per-block limits every CUDA arch since sm_30 shares (1024 threads; 48 KiB of static
#: shared memory, more only by opting in at launch). MetaSchedule's GPU rules and its
#: verifier read them from the target and refuse a target without them.
CUDA_BLOCK_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152}
#: The PassContext option that turns on Relax's RewriteCUDAGraph (in the CUDA pipeline,
#: a no-op without it).
CUDA_GRAPH_CONFIG = "relax.backend.use_cuda_graph"


def local_cuda_gpu() -> dict[str, str] | None:
    """This machine's first CUDA GPU (name, arch), or None."""
    import tvm

    try:
        dev = tvm.cuda(0)
        if not dev.exist:
            return None
        return {"name": str(dev.device_name),
                "arch": "sm_" + str(dev.compute_version).replace(".", "")}
    except Exception:  # noqa: BLE001 - a TVM without CUDA: no GPU to use
        return None


class CUDAParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    arch: str | None = Field(
        None, pattern=r"^sm_\d+[a-z]?$",
        description=f"GPU arch, e.g. sm_72 (default: this machine's GPU, else "
                    f"{DEFAULT_CUDA_ARCH})")
    host: LLVMParams = Field(default_factory=LLVMParams,
                             description="the CPU side (an `llvm` target's params)")
    schedules: Literal["algorithm", "bindings", "reduction"] = Field(
        "algorithm", description="untuned kernels: algorithm (each conv algorithm's GPU "
                                 "schedule: dense convs tiled as implicit GEMMs in shared "
                                 "memory and registers), bindings (threads bound only, "
                                 "the reduction serial per thread) or reduction (each "
                                 "output's reduction split over a warp's lanes, a few "
                                 "outputs a block: batch 1's parallelism; not yet timed on "
                                 "a GPU)")
    cuda_graph: bool = Field(
        False, description="build with Relax's CUDA-graph rewrite: the kernels that touch "
                           "only the model's own buffers are captured into a CUDA graph on "
                           "the first call and replayed on later ones, one launch instead of "
                           "one per kernel (the first call is the discarded warm-up)")

    @field_validator("arch")
    @classmethod
    def _known_arch(cls, value: str | None) -> str | None:
        return None if value is None else check_cuda_arch(value)


def cuda_spec(params: CUDAParams, *, board: bool = False) -> TargetSpec:
    """The TargetSpec of a CUDA target; `board`: a remote board's GPU (not looked for)."""
    if board and params.arch is None:
        raise ValueError("a remote CUDA board needs its arch set (e.g. sm_72 for a Jetson "
                         "AGX Xavier): it cannot be detected from here")
    gpu = None if board else local_cuda_gpu()
    arch = params.arch or (gpu["arch"] if gpu else DEFAULT_CUDA_ARCH)
    host_spec = llvm_spec(params.host, board=board)
    unmeasurable = None if board else host_spec.unmeasurable or (None if gpu else NO_GPU)
    return TargetSpec(
        name="cuda", tvm_target={"kind": "cuda", "arch": arch, **CUDA_BLOCK_LIMITS,
                                 "host": host_spec.tvm_target},
        device="cuda", num_threads=host_spec.num_threads,
        fingerprint={"gpu": gpu["name"] if gpu else None, "arch": arch,
                     "host": host_spec.fingerprint},
        unmeasurable=unmeasurable,
        pass_config={CUDA_GRAPH_CONFIG: True} if params.cuda_graph else {},
        gpu_schedules=params.schedules)


@register("targets", "cuda", params=CUDAParams,
          description="a CUDA GPU: minimal thread-bound schedules; measured only where a "
                      "GPU is present")
def cuda(params: CUDAParams) -> TargetSpec:
    return cuda_spec(params)


# -- boards over TVM RPC -----------------------------------------------------------------

class BoardTarget(BaseModel):
    """The board's target: another target option (not `remote`) and its params."""

    model_config = ConfigDict(extra="forbid")
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class RemoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, description="the key the board's rpc_server registered")
    tracker_host: str = Field("127.0.0.1", min_length=1, description="RPC tracker host")
    tracker_port: int = Field(9190, ge=1, le=65535, description="RPC tracker port")
    target: BoardTarget = Field(
        default_factory=lambda: BoardTarget(name="llvm"),
        description="the board's target: {name: llvm|cuda|..., params: {...}}")
    session_timeout_s: float = Field(600.0, gt=0, description="longest measurement session")
    request_timeout_s: float = Field(60.0, gt=0, description="wait for a free board")

    @field_validator("target", mode="before")
    @classmethod
    def _name_only(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _board_params(self) -> RemoteParams:
        try:  # fail at config time, each error at its own key (target.params.<key>)
            board = self.board_option().parse_params(self.target.params)
        except ValidationError as exc:
            raise ValidationError.from_exception_data(exc.title, [
                InitErrorDetails(type=e["type"], loc=("target", "params", *e["loc"]),
                                 input=e["input"], ctx=e.get("ctx", {}))
                for e in exc.errors()]) from None
        if isinstance(board, CUDAParams) and board.arch is None:
            raise ValueError("a remote CUDA board needs its arch set (e.g. sm_72 for a "
                             "Jetson AGX Xavier): it cannot be detected from here")
        return self

    def board_option(self) -> Option:
        from dlas import registry

        if self.target.name in _NOT_BOARDS:
            raise ValueError(f"a remote board's target cannot be `{self.target.name}`: "
                             f"{_NOT_BOARDS[self.target.name]}")
        try:
            return registry.get("targets", self.target.name)
        except registry.UnknownOptionError as err:
            raise ValueError(str(err)) from None


_NOT_BOARDS = {
    "remote": "boards are not chained",
    "host": "`host` is the machine running dlas; describe the board with `llvm` "
            "(arch, mcpu, threads)",
}


def _board_spec(option: Option, params: BaseModel) -> TargetSpec:
    if isinstance(params, LLVMParams):
        return llvm_spec(params, board=True)
    if isinstance(params, CUDAParams):
        return cuda_spec(params, board=True)
    return option.fn(params)  # a third-party target option describes its own board


def _threads_explicit(params: BaseModel) -> bool:
    if isinstance(params, CUDAParams):
        return params.host.threads is not None
    return getattr(params, "threads", None) is not None


@register("targets", "remote", params=RemoteParams,
          description="any target, measured on a board reached through a TVM RPC tracker")
def remote(params: RemoteParams) -> TargetSpec:
    option = params.board_option()
    board_params = option.parse_params(params.target.params)
    board = _board_spec(option, board_params)
    threads = board.num_threads if _threads_explicit(board_params) else None
    tvm_target = board.tvm_target
    if threads is None:  # this machine's core count says nothing about the board's
        tvm_target = _without_num_cores(tvm_target)
    return dataclasses.replace(
        board, name="remote", tvm_target=tvm_target, num_threads=threads,
        # the tracker key names the board: two boards never share a measurement
        fingerprint={"rpc_key": params.key, "board": option.name,
                     "target": board.fingerprint},
        rpc=RPCTracker(host=params.tracker_host, port=params.tracker_port, key=params.key,
                       session_timeout_s=params.session_timeout_s,
                       request_timeout_s=params.request_timeout_s),
        unmeasurable=None)


def _without_num_cores(target: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in target.items() if k != "num-cores"}
    if isinstance(out.get("host"), dict):
        out["host"] = _without_num_cores(out["host"])
    return out
