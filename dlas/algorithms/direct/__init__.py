"""The direct convolution: sliding window over NCHW, with its minimal parallel schedule."""

from __future__ import annotations

from collections.abc import Mapping

from tvm import s_tir, te
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..base import RAW_WEIGHT, ConvAlgorithm, ConvSpec
from .compute import conv2d_nchw_direct
from .schedule import schedule_direct

#: dtype combinations (data, weight, out) the direct conv is tested with.
SUPPORTED_DTYPES = {
    ("float32", "float32", "float32"),
    ("float16", "float16", "float16"),
    ("float16", "float16", "float32"),
    ("uint8", "int8", "int32"),
    ("int8", "int8", "int32"),
}


class DirectConv(ConvAlgorithm):
    """Direct convolution (`compute.py`) with the minimal schedule of `schedule.py`.

    `vectorize=False` keeps only the thread parallelism (no SIMD over the output width):
    about 8x slower on a CIFAR ResNet18 with AVX-512, useful to separate the two effects.
    """

    name = "direct"

    def __init__(self, vectorize: bool = True) -> None:
        self.vectorize = vectorize

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        dtypes = (spec.data_dtype, spec.weight_dtype, spec.out_dtype)
        if dtypes not in SUPPORTED_DTYPES:
            return f"dtypes (data, weight, out) = {dtypes} not supported"
        return None

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        return conv2d_nchw_direct(data, weights[RAW_WEIGHT], spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        return schedule_direct(sch, block, spec, vectorize=self.vectorize)


__all__ = ["DirectConv", "conv2d_nchw_direct", "schedule_direct"]
