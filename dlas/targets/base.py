"""The contract of a target option (layer 6): `fn(params) -> TargetSpec`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TargetSpec:
    name: str
    #: TVM target as a JSON dict (CLI strings fail in TVM 0.27).
    tvm_target: dict[str, Any]
    device: str = "cpu"
    num_threads: int | None = None
    #: What identifies the hardware for cache keys beyond the target dict.
    fingerprint: dict[str, Any] = field(default_factory=dict)
