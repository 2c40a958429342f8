"""The direct convolution, dense and CSR: sliding window over NCHW, no data reshaping."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from tvm import s_tir, te, tirx
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.target import Target

from ...tir.schedule_helpers import target_is_gpu
from ..base import RAW_WEIGHT, ConvAlgorithm, ConvSpec
from ..blocked import PACKED_WEIGHT, VectorLayouts, blocking_of, vector_layout_reason
from ..csr import DATA, INDICES, INDPTR, CSRFormat, block_csr_from_weight
from ..dot_conv import Int8DotProduct, dot_intrinsic
from ..int8_dot import COMPENSATION
from ..spmm_kernel import OFFSETS, sparse_rows
from .compute import (
    CSR_ROW_NAME,
    VECTOR_DOT_NAME,
    conv2d_nchw_direct,
    conv2d_nchw_direct_csr,
    conv2d_nchw_direct_csr_rows,
    conv2d_vector_direct,
    conv2d_vector_direct_csr,
    conv2d_vector_direct_dot,
    direct_csr_plan,
    pack_columns,
)
from .gpu import schedule_direct_gpu
from .schedule import (
    schedule_csr_rows_form,
    schedule_direct,
    schedule_direct_csr,
    schedule_direct_vector,
    schedule_direct_vector_csr,
)


class DirectConv(Int8DotProduct, VectorLayouts, ConvAlgorithm):
    """Direct convolution (`compute.py`) with the minimal schedule of `schedule.py`.

    Computes every conv kind (strides, padding, dilation, grouped, depthwise) in NCHW,
    which is why other algorithms fall back to it, and plain and depthwise convs in the
    vector layouts (NHWC, NCHWc), where its schedule is the register-tiled micro-kernel.
    int8 convs in NCHWc run on the CPU's integer dot product where it has one
    (`dlas.algorithms.int8_dot`: VNNI, or AVX2 for 7-bit weights).
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
        if COMPENSATION in weights:
            return conv2d_vector_direct_dot(data, weights[PACKED_WEIGHT],
                                            weights[COMPENSATION], spec)
        if not spec.is_nchw:
            return conv2d_vector_direct(data, weights[PACKED_WEIGHT], spec)
        return conv2d_nchw_direct(data, weights[RAW_WEIGHT], spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if sch.get(block).name_hint == VECTOR_DOT_NAME:
            return schedule_direct_vector(sch, block, spec, dot=dot_intrinsic(spec))
        if not spec.is_nchw:
            return schedule_direct_vector(sch, block, spec)
        return schedule_direct(sch, block, spec, vectorize=self.vectorize)

    def gpu_schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        return schedule_direct_gpu(func, target)


#: Why a strided NCHW conv is not computed in place by `direct_csr` (see its fallback).
STRIDED_CSR_REASON = ("a strided conv read in place gives the sparse kernel strided "
                      "vector loads (gathers: 4-6x slower than packing the input by phase)")


class DirectCSRConv(CSRFormat, ConvAlgorithm):
    """Direct convolution over a CSR weight. NCHW on a CPU: every stride-1 conv kind, by
    the pixel-tile sparse kernel (`dlas.algorithms.spmm_kernel`) over the padded input in
    place; strided convs fall back to `spatial_pack_csr` (recorded per conv), whose phase
    planes give the kernel contiguous loads. NCHW on a GPU: every conv kind, a row
    kernel per output channel, a thread per output pixel. NHWC and NCHWc: plain and
    depthwise convs over block-CSR (rows of one output-channel vector, columns the whole
    vector pruned skipped)."""

    name = "direct_csr"
    layouts = VectorLayouts.layouts

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        if not spec.is_nchw:
            reason = vector_layout_reason(spec)
            if reason is not None:
                return reason
        elif spec.strides != (1, 1) and not target_is_gpu():
            return STRIDED_CSR_REASON
        return super().unsupported_reason(spec)

    def fallback(self) -> ConvAlgorithm:
        # through the registry: spatial_pack imports direct (its own fallbacks)
        from dlas import registry

        return registry.create("algorithms", "spatial_pack_csr", {})

    def weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                         ) -> dict[str, np.ndarray]:
        if weight_value is None:
            return super().weight_constants(spec, weight_value)
        if spec.is_nchw and target_is_gpu():
            return super().weight_constants(spec, weight_value)  # the rows form's CSR
        if spec.is_nchw:
            layout, tiling = direct_csr_plan(spec, weight_value)
            return sparse_rows(weight_value, spec, layout.grid, tiling)
        arrays = block_csr_from_weight(weight_value, blocking_of(spec).out_block)
        arrays[INDICES] = pack_columns(spec, arrays[INDICES])
        return arrays

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        if not spec.is_nchw:
            return conv2d_vector_direct_csr(data, weights[DATA], weights[INDICES],
                                            weights[INDPTR], spec)
        if INDICES in weights:  # a GPU's
            return conv2d_nchw_direct_csr_rows(data, weights[DATA], weights[INDICES],
                                               weights[INDPTR], spec)
        return conv2d_nchw_direct_csr(data, weights[DATA], weights[OFFSETS],
                                      weights[INDPTR], spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if not spec.is_nchw:
            return schedule_direct_vector_csr(sch, block, spec)
        if sch.get(block).name_hint == CSR_ROW_NAME:
            return schedule_csr_rows_form(sch, block, spec)
        return schedule_direct_csr(sch, block, spec)


__all__ = ["DirectCSRConv", "DirectConv"]
