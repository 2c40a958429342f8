"""The targets dlas ships (layer 6)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register
from dlas.targets.base import TargetSpec


class HostParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threads: int | None = Field(None, ge=1, description="worker threads (default: all cores)")
    mcpu: str | None = Field(None, description="override the detected LLVM -mcpu")


@register("targets", "host", params=HostParams,
          description="this machine's CPU as an LLVM target, -mcpu and cores detected")
def host(params: HostParams) -> TargetSpec:
    from dlas.targets.host import detect_host_cpu, host_target

    cpu = detect_host_cpu()
    threads = params.threads or cpu["cores"]
    target = host_target(num_threads=threads)
    if params.mcpu:
        target = {**target, "mcpu": params.mcpu}
    return TargetSpec(name="host", tvm_target=target, device="cpu", num_threads=threads,
                      fingerprint={"cpu": cpu.get("model")})
