"""The direct convolution, dense and CSR: sliding window over NCHW, no data reshaping."""

from __future__ import annotations

from collections.abc import Mapping

from tvm import s_tir, te
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..base import RAW_WEIGHT, ConvAlgorithm, ConvSpec
from ..blocked import PACKED_WEIGHT, VectorLayouts
from ..csr import DATA, INDICES, INDPTR, CSRFormat
from .compute import conv2d_nchw_direct, conv2d_nchw_direct_csr, conv2d_vector_direct
from .schedule import schedule_direct, schedule_direct_csr, schedule_direct_vector


class DirectConv(VectorLayouts, ConvAlgorithm):
    """Direct convolution (`compute.py`) with the minimal schedule of `schedule.py`.

    Computes every conv kind (strides, padding, dilation, grouped, depthwise) in NCHW,
    which is why other algorithms fall back to it, and plain and depthwise convs in the
    vector layouts (NHWC, NCHWc), where its schedule is the register-tiled micro-kernel.
    `vectorize=False` keeps only the thread parallelism of the NCHW schedule (no SIMD over
    the output width): about 8x slower on a CIFAR ResNet18 with AVX-512, useful to
    separate the two effects.
    """

    name = "direct"

    def __init__(self, vectorize: bool = True, layout: str = "NCHW",
                 block: int | None = None) -> None:
        super().__init__(layout, block)
        self.vectorize = vectorize

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        if not spec.is_nchw:
            return conv2d_vector_direct(data, weights[PACKED_WEIGHT], spec)
        return conv2d_nchw_direct(data, weights[RAW_WEIGHT], spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if not spec.is_nchw:
            return schedule_direct_vector(sch, block, spec)
        return schedule_direct(sch, block, spec, vectorize=self.vectorize)


class DirectCSRConv(CSRFormat, ConvAlgorithm):
    """Direct convolution over a CSR weight: every conv kind, zeros skipped."""

    name = "direct_csr"

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        return conv2d_nchw_direct_csr(data, weights[DATA], weights[INDICES], weights[INDPTR],
                                      spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        return schedule_direct_csr(sch, block, spec)


__all__ = ["DirectCSRConv", "DirectConv"]
