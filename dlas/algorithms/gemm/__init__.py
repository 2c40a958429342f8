"""The GEMM convolution (im2col + matrix multiplication), dense and CSR."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from tvm import s_tir, te, tirx
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.target import Target

from ...tir.schedule_helpers import target_is_gpu
from ..base import ConvAlgorithm, ConvSpec
from ..blocked import PACKED_WEIGHT, VectorLayouts
from ..csr import DATA, INDICES, INDPTR, CSRFormat
from ..dot_conv import Int8DotProduct, dot_intrinsic
from ..int8_dot import COMPENSATION
from ..spmm_kernel import OFFSETS, sparse_rows
from .compute import (
    CSR_ROW_NAME,
    VECTOR_GEMM_DOT_NAME,
    WEIGHT_2D,
    conv2d_nchw_gemm,
    conv2d_nchw_gemm_csr,
    conv2d_nchw_gemm_csr_rows,
    conv2d_vector_gemm,
    conv2d_vector_gemm_dot,
    gemm_csr_plan,
)
from .gpu import schedule_gemm_gpu
from .schedule import (
    schedule_gemm,
    schedule_gemm_csr,
    schedule_gemm_csr_rows,
    schedule_gemm_vector,
)


class GemmConv(Int8DotProduct, VectorLayouts, ConvAlgorithm):
    """im2col + GEMM, every conv kind in NCHW (grouped and depthwise as per-group GEMMs);
    plain and depthwise convs in NHWC and NCHWc.

    NCHW: the weight is reshaped to (O, Cg*KH*KW) at compile time when it is a constant.
    NHWC/NCHWc: packed (`blocked.pack_weight`); im2col rows are contiguous in K. int8
    convs in NCHWc run on the CPU's integer dot product where it has one
    (`dlas.algorithms.dot_conv`), as direct's and spatial pack's do.
    """

    name = "gemm"

    def nchw_weight_constants(
        self, spec: ConvSpec, weight_value: np.ndarray | None
    ) -> dict[str, np.ndarray] | None:
        if weight_value is None:
            return None  # reshape by index arithmetic on the raw weight instead
        return {WEIGHT_2D: np.ascontiguousarray(weight_value.reshape(spec.out_channels, -1))}

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        if COMPENSATION in weights:
            return conv2d_vector_gemm_dot(data, weights[PACKED_WEIGHT], weights[COMPENSATION],
                                          spec)
        if not spec.is_nchw:
            return conv2d_vector_gemm(data, weights[PACKED_WEIGHT], spec)
        return conv2d_nchw_gemm(data, dict(weights), spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if sch.get(block).name_hint == VECTOR_GEMM_DOT_NAME:
            return schedule_gemm_vector(sch, block, spec, dot=dot_intrinsic(spec))
        if not spec.is_nchw:
            return schedule_gemm_vector(sch, block, spec)
        return schedule_gemm(sch, block, spec)

    def gpu_schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        return schedule_gemm_gpu(func, target)


class GemmCSRConv(CSRFormat, ConvAlgorithm):
    """im2col + CSR-sparse x dense matrix product, every conv kind, zeros skipped: by the
    pixel-tile sparse kernel (`dlas.algorithms.spmm_kernel`) on a CPU, by a row kernel
    per output channel (a thread per output pixel) on a GPU."""

    name = "gemm_csr"

    def weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                         ) -> dict[str, np.ndarray]:
        if weight_value is None or target_is_gpu():
            return super().weight_constants(spec, weight_value)  # the rows form's CSR
        grid, tiling = gemm_csr_plan(spec, weight_value)
        return sparse_rows(weight_value, spec, grid, tiling)

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        if INDICES in weights:  # a GPU's
            return conv2d_nchw_gemm_csr_rows(data, weights[DATA], weights[INDICES],
                                             weights[INDPTR], spec)
        return conv2d_nchw_gemm_csr(data, weights[DATA], weights[OFFSETS], weights[INDPTR],
                                    spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if sch.get(block).name_hint == CSR_ROW_NAME:
            return schedule_gemm_csr_rows(sch, block, spec)
        return schedule_gemm_csr(sch, block, spec)


__all__ = ["GemmCSRConv", "GemmConv"]
