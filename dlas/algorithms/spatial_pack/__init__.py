"""The spatial-pack convolution (tiled packing of data and weights), dense and CSR."""

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
from ..direct import DirectConv, DirectCSRConv
from ..dot_conv import Int8DotProduct, dot_intrinsic
from ..int8_dot import COMPENSATION
from ..spmm_kernel import OFFSETS, sparse_rows
from .compute import (
    CSR_UNPACK_NAME,
    KERNEL_VEC,
    VECTOR_DOT_TILES_NAME,
    conv2d_nchw_spatial_pack,
    conv2d_nchw_spatial_pack_csr,
    conv2d_nchw_spatial_pack_csr_rows,
    conv2d_vector_spatial_pack,
    conv2d_vector_spatial_pack_dot,
    pack_kernel,
    spatial_pack_csr_plan,
)
from .gpu import schedule_spatial_pack_gpu
from .schedule import (
    schedule_spatial_pack,
    schedule_spatial_pack_csr,
    schedule_spatial_pack_csr_rows,
    schedule_spatial_pack_vector,
)

GROUPED_REASON = ("spatial pack tiles whole input channels; grouped/depthwise convs have "
                  "no packed form")


class SpatialPackConv(Int8DotProduct, VectorLayouts, ConvAlgorithm):
    """Spatial pack for groups == 1, in every layout; grouped and depthwise convs fall
    back to `direct` (in the same layout). int8 convs in NCHWc run on the CPU's integer
    dot product where it has one (`dlas.algorithms.dot_conv`), as direct's and GEMM's do."""

    name = "spatial_pack"

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        if spec.groups != 1:
            return GROUPED_REASON
        return super().unsupported_reason(spec)

    def fallback(self) -> ConvAlgorithm:
        return DirectConv(layout=self.layout, block=self.block)

    def nchw_weight_constants(
        self, spec: ConvSpec, weight_value: np.ndarray | None
    ) -> dict[str, np.ndarray] | None:
        if weight_value is None:
            return None  # packed by a stage at run time instead
        return {KERNEL_VEC: pack_kernel(spec, weight_value)}

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        if COMPENSATION in weights:
            return conv2d_vector_spatial_pack_dot(data, weights[PACKED_WEIGHT],
                                                  weights[COMPENSATION], spec)
        if not spec.is_nchw:
            return conv2d_vector_spatial_pack(data, weights[PACKED_WEIGHT], spec)
        return conv2d_nchw_spatial_pack(data, dict(weights), spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if not spec.is_nchw:
            (tiles,) = sch.get_producers(block)
            dotted = sch.get(tiles).name_hint == VECTOR_DOT_TILES_NAME
            return schedule_spatial_pack_vector(sch, block, spec,
                                                dot=dot_intrinsic(spec) if dotted else None)
        return schedule_spatial_pack(sch, block, spec)

    def gpu_schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        return schedule_spatial_pack_gpu(func, target)


class SpatialPackCSRConv(CSRFormat, ConvAlgorithm):
    """On a CPU, the input packed into one plane per (row phase, kernel column) and
    multiplied by the CSR weight rows with the pixel-tile sparse kernel
    (`dlas.algorithms.spmm_kernel`); every conv kind. On a GPU, the input packed in
    tiles with their halo, a row kernel per output channel (a thread per tile pixel),
    groups == 1; grouped and depthwise convs fall back to `direct_csr` there."""

    name = "spatial_pack_csr"

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        if spec.groups != 1 and target_is_gpu():
            return GROUPED_REASON
        return super().unsupported_reason(spec)

    def fallback(self) -> ConvAlgorithm:
        return DirectCSRConv()

    def weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                         ) -> dict[str, np.ndarray]:
        if weight_value is None or target_is_gpu():
            return super().weight_constants(spec, weight_value)  # the rows form's CSR
        planes, tiling = spatial_pack_csr_plan(spec, weight_value)
        return sparse_rows(weight_value, spec, planes.grid, tiling)

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        if INDICES in weights:  # a GPU's
            return conv2d_nchw_spatial_pack_csr_rows(data, weights[DATA], weights[INDICES],
                                                     weights[INDPTR], spec)
        return conv2d_nchw_spatial_pack_csr(data, weights[DATA], weights[OFFSETS],
                                            weights[INDPTR], spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if sch.get(block).name_hint == CSR_UNPACK_NAME:
            return schedule_spatial_pack_csr_rows(sch, block, spec)
        return schedule_spatial_pack_csr(sch, block, spec)


__all__ = ["SpatialPackCSRConv", "SpatialPackConv"]
