"""Sparse where it pays, dense elsewhere: each conv of a pruned model computed by the
faster of two kernels for its weight.

Why: global L1 pruning does not prune layers alike. ResNet18-w0.5 pruned to 90% and
fine-tuned on digits keeps 58% of its first stage's weights and 1% of its last's; at 58%
the pixel-tile sparse kernel is no faster than the dense NCHWc micro-kernel, at 1% it is
an order of magnitude faster. One algorithm for the whole model, as the paper compares
them, makes the sparse kernel pay for the layers pruning barely touched.

So, per conv, by the weight's density (its non-zeros over its weights, known at compile
time): from `dense_above` up (by default the value for the conv's kind and the width of
the target's FMA units, `DENSE_ABOVE_BY_BITS` and, for 1x1 and depthwise convs,
`DENSE_ABOVE_THIN_BY_BITS`), the dense direct micro-kernel in NCHWc
(`dlas.algorithms.direct`, the fastest dense untuned variant); below it, the pixel-tile
sparse kernel, which computes in NCHW: over the padded input in place (`direct_csr`) for
stride-1 convs at least `WIDE` pixels wide, where spatial pack's three column planes
per channel overflow L1 (32x32, 90%: 51 against 74 us), else over spatial pack's phase
planes (`spatial_pack_csr`: 16x16 and below, strided convs). The model is kept in
NCHWc; the layout pass keeps the sparse convs NCHW (`keeps_nchw`) and reorders around
them, so the reorders are in the model's time, and its report says which conv took which
kernel and why
(`layout_report`, "kept NCHW"). A dense conv between convs kept NCHW (a depthwise conv
between two sparse 1x1 convs) is computed by `direct` in NCHW instead, without the
reorders (`between_nchw`; MobileNetV2-w0.5 with its 1x1 convs pruned 90%: 0.630 ->
0.390 ms, Zen 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from tvm import s_tir, te
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..tir.layout import LAYOUT_KINDS
from ..tir.schedule_helpers import target_simd
from .base import RAW_WEIGHT, ConvAlgorithm, ConvSpec
from .csr import CSRFormat
from .direct import DirectConv, DirectCSRConv
from .direct.compute import CONV_NAME as DIRECT_CONV_NAME
from .spatial_pack import SpatialPackCSRConv

#: Output width from which a stride-1 sparse conv reads its input in place.
WIDE = 32
#: Default density from which a conv takes the dense kernel, per width of the FMA units in
#: bits (`Simd.fma_bits`): where the two kernels met on ResNet18-w0.5's convs, 2 threads
#: (`dlas profile`, and sweeps of `dense_above`, global and per layer pruning at 80 and
#: 90%). The crossover moves with the multiply-add throughput: the dense micro-kernel's
#: scales with the lanes its units complete, the sparse kernel's per-entry work (its
#: offset, the broadcast value) does not, so narrower units favour the sparse kernel.
#: - 512 (Xeon Cascade Lake, AVX-512): the sparse kernel 1.1-1.6x slower at 0.58 density,
#:   even at about 0.4, 2x faster at 0.18.
#: - 256 (AMD EPYC Zen 3, AVX2): the sparse kernel 1.08x slower at 0.58 (32x32) and 1.2x at
#:   0.67; 1.06x faster at 0.56 (16x16, stride 2), 1.1x at 0.52 and 1.4x at 0.40 (16x16);
#:   with 0.35, a 90% global ResNet18 computed its 0.40-density stage dense and took
#:   1.729 ms against 1.537 all sparse.
#: - 256 (AMD EPYC Zen 4: 512-bit registers, 256-bit units): one sweep of `dense_above`
#:   0.35 / 0.55 / 0.7 / 1.0 took ResNet18-w0.5 pruned 90% globally 1.004 / 0.895 / 1.071
#:   / 1.019 ms, 80% 1.164 / 1.035 / 1.302 / 1.321, block 16x1 80% 1.135 / 1.014 / 0.991
#:   / 1.103 (dense 1.554): the AVX2 crossover, not Cascade Lake's.
#: Other widths (128-bit SSE and Neon) are unmeasured and take the nearest (256).
DENSE_ABOVE_BY_BITS = {512: 0.35, 256: 0.55}
#: The same for thin convs, 1x1 and depthwise: little work per input byte, so the dense
#: micro-kernel runs further under its peak there and the sparse kernel pays up to a higher
#: density. MobileNetV2-w0.5 on the Zen 4 (one sweep of `dense_above` 0.55 / 0.7 / 0.85 /
#: 1.0; its depthwise convs keep 0.66-0.83 of their weights under global pruning, its 1x1
#: convs 0-0.84): 90% global 0.462 / 0.421 / 0.374 / 0.375 ms, 80% global 0.544 / 0.495 /
#: 0.428 / 0.426, block 16x1 80% 0.495 / 0.500 / 0.450 / 0.459 (dense 0.624). 512 bits
#: (Cascade Lake) is unmeasured for them and keeps the full convs' value.
DENSE_ABOVE_THIN_BY_BITS = {512: 0.35, 256: 0.85}


def is_thin(spec: ConvSpec) -> bool:
    """A 1x1 or depthwise conv (`DENSE_ABOVE_THIN_BY_BITS`)."""
    return spec.kernel_size == (1, 1) or spec.is_depthwise


def default_dense_above(spec: ConvSpec | None = None) -> float:
    """The default crossover density for `spec`'s kind of conv (full, or thin: `is_thin`)
    and the width of the current target's FMA units (`dlas.tir.schedule_helpers.
    target_simd`; forced in tests)."""
    table = DENSE_ABOVE_THIN_BY_BITS if spec is not None and is_thin(spec) \
        else DENSE_ABOVE_BY_BITS
    bits = target_simd().fma_bits
    return table[min(table, key=lambda b: abs(b - bits))]


def density(weight: np.ndarray | None) -> float | None:
    """Non-zeros over weights (None without a weight)."""
    if weight is None or weight.size == 0:
        return None
    return float(np.count_nonzero(weight)) / weight.size


class MixedCSRConv(CSRFormat, ConvAlgorithm):
    """Per conv, the dense NCHWc micro-kernel or the NCHW pixel-tile sparse kernel, by the
    weight's density (see the module doc)."""

    name = "mixed_csr"
    layouts = frozenset(LAYOUT_KINDS) - {"NHWC"}

    def __init__(self, dense_above: float | None = None, block: int | None = None) -> None:
        super().__init__("NCHWc", block)
        if dense_above is not None and not 0.0 <= dense_above <= 1.0:
            raise ValueError(f"dense_above must be a density in [0, 1], got {dense_above}")
        #: None: the target's FMA width decides (`default_dense_above`), when asked,
        #: inside the compiler's `with target`.
        self.dense_above = dense_above
        self.dense = DirectConv(layout="NCHWc", block=block)
        self.in_place = DirectCSRConv()
        self.packed = SpatialPackCSRConv()

    def _kernel(self, spec: ConvSpec, weight_value: np.ndarray | None = None
                ) -> ConvAlgorithm:
        if not spec.is_nchw:
            return self.dense
        share = density(weight_value)
        if share is not None and share >= self.crossover(spec):
            return self.dense  # `between_nchw`: the direct conv in NCHW
        if spec.strides == (1, 1) and spec.out_shape[3] >= WIDE:
            return self.in_place
        return self.packed

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        return self._kernel(spec).unsupported_reason(spec)

    def crossover(self, spec: ConvSpec | None = None) -> float:
        """The density from which a conv (of `spec`'s kind) is dense: `dense_above`, or
        the target's default."""
        return self.dense_above if self.dense_above is not None \
            else default_dense_above(spec)

    def keeps_nchw(self, spec: ConvSpec, weight_value: np.ndarray | None) -> str | None:
        share = density(weight_value)
        above = self.crossover(spec)
        if share is None or share >= above:
            return None
        layout = self._kernel(replace(spec, data_layout="NCHW", out_layout="NCHW")).name
        return (f"density {share:.2f} < {above:g}: the pixel-tile sparse kernel "
                f"({layout}), in NCHW")

    def between_nchw(self, spec: ConvSpec, weight_value: np.ndarray | None) -> str | None:
        share = density(weight_value)
        if share is None or self.dense.unsupported_reason(spec) is not None:
            return None
        return (f"density {share:.2f}, between convs kept in NCHW: "
                f"{self._kernel(spec, weight_value).name} in NCHW, no reorders")

    def weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                         ) -> dict[str, np.ndarray] | None:
        return self._kernel(spec, weight_value).weight_constants(spec, weight_value)

    def compute(self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
                ) -> te.Tensor:
        if spec.is_nchw and RAW_WEIGHT in weights:  # dense in NCHW (`between_nchw`)
            return self.dense.compute(data, weights, spec)
        return self._kernel(spec).compute(data, weights, spec)

    def schedule(self, sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV | None:
        if spec.is_nchw and sch.get(block).name_hint == DIRECT_CONV_NAME:
            return self.dense.schedule(sch, block, spec)
        return self._kernel(spec).schedule(sch, block, spec)


__all__ = ["DENSE_ABOVE_BY_BITS", "DENSE_ABOVE_THIN_BY_BITS", "WIDE", "MixedCSRConv",
           "default_dense_above", "density", "is_thin"]
