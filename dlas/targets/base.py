"""The contract of a target option (layer 6): `fn(params) -> TargetSpec`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RPCTracker:
    """Where a remote board is reached: a TVM RPC tracker and the key boards register under."""

    host: str
    port: int
    key: str
    #: How long one measurement session may stay open on the board.
    session_timeout_s: float = 600.0
    #: How long to wait for a free device under `key` before giving up.
    request_timeout_s: float = 60.0


@dataclass(frozen=True)
class TargetSpec:
    name: str
    #: TVM target as a JSON dict (CLI strings fail in TVM 0.27).
    tvm_target: dict[str, Any]
    #: TVM device type the compiled model runs on: "cpu" or "cuda".
    device: str = "cpu"
    num_threads: int | None = None
    #: What identifies the hardware for cache keys beyond the target dict.
    fingerprint: dict[str, Any] = field(default_factory=dict)
    #: Set for boards measured through a TVM RPC tracker; None measures in this process.
    rpc: RPCTracker | None = None
    #: Why this target cannot be measured from here (it is still compiled), or None.
    unmeasurable: str | None = None
    #: TVM PassContext config the model is built in, beside dlas's own (e.g. Relax's
    #: CUDA-graph rewrite, `relax.backend.use_cuda_graph`). Part of the compile key
    #: through the target's parameters, and so of the row.
    pass_config: dict[str, Any] = field(default_factory=dict)
    #: A GPU's untuned schedules: "algorithm" (each conv algorithm's own GPU schedule
    #: where it has one, `ConvAlgorithm.gpu_schedule`) or "bindings" (every kernel only
    #: bound to blocks and threads: the benchmark row that shows what the tiling buys).
    gpu_schedules: str = "algorithm"
