"""The int8 dot-product form of a blocked-layout conv, shared by every dense algorithm:
the choice (`Int8DotProduct`, a mixin) and the conv block (`dot_conv_block`).

Direct, GEMM and spatial pack differ in what their int8 product reads (the padded input,
its im2col matrix, its packed tiles) and in the shape of what it writes (the output, or
spatial pack's tiles), not in the product: each output lane sums, over (input chunk,
kernel row, kernel column, group of 4 input channels, channel in the group), an input
byte times the packed weight `[O/lanes, C/chunk, KH, KW, chunk/4, lanes, 4]`, starting
at its channel's compensation. So one builder writes that block for all three, from the
algorithm's output shape and its input's index (`DotIndex`), and one mixin makes the
choice for all three, once, from the compile-time weights (`int8_dot.int8_dot_kind`).
With the same packing, the same loop order and the same intrinsic, a study that
compares the algorithms in int8 compares how they reach their data, as it does in fp32,
and not which of them dlas gave the CPU's dot product.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .base import ConvSpec
from .blocked import PACKED_WEIGHT, blocking_of
from .int8_dot import (
    COMPENSATION,
    DOT_INPUTS,
    compensation,
    int8_dot_kind,
    intrinsic_name,
    pack_dot_weight,
    target_dot_kind,
)

#: The reduction loops of every dot-product block, outermost first: input chunk, kernel
#: row, kernel column, group of 4 input channels, channel in the group (the intrinsic's).
REDUCTION_NAMES = ("rc", "ry", "rx", "rg", "rk")

#: (output axes by name, reduction axes (rc, ry, rx, rg, rk)) -> the index of the input
#: byte that output reads at that reduction point.
DotIndex = Callable[[dict[str, tirx.Var], Sequence[tirx.Var]], tuple[tirx.Expr, ...]]


class Int8DotProduct:
    """Mixin of a `VectorLayouts` algorithm whose int8 convs in NCHWc run on the CPU's
    integer dot product where the target has one and the weights suit it. Put it before
    `VectorLayouts`: the choice is made here, once, from the compile-time weight, and the
    algorithm's compute follows `COMPENSATION in weights`, its schedule the block name."""

    def weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                         ) -> dict[str, np.ndarray] | None:
        if weight_value is None or int8_dot_kind(spec, weight_value) is None:
            return super().weight_constants(spec, weight_value)  # type: ignore[misc]
        return {PACKED_WEIGHT: pack_dot_weight(spec, weight_value),
                COMPENSATION: compensation(spec, weight_value)}


def dot_intrinsic(spec: ConvSpec) -> str:
    """The intrinsic family a dot-product block of `spec` is tensorized with on the
    current target (a ValueError where the target has none: the compute was made for a
    target that has one)."""
    kind = target_dot_kind(spec)
    if kind is None:
        raise ValueError(f"{spec} was computed for an int8 dot product that the target "
                         "scheduling it lacks")
    return intrinsic_name(kind, blocking_of(spec).out_block)


def dot_conv_block(name: str, spec: ConvSpec, data: te.Tensor, packed: te.Tensor,
                   start: te.Tensor, out_shape: Sequence[int], out_names: Sequence[str],
                   data_index: DotIndex) -> tirx.PrimFunc:
    """One TIR block `name` over `out_shape` (axes `out_names`, which name the output
    channel chunk "oc" and its lane "lane") and the dot product's reduction:

        out[o] = start[oc*lanes + lane]
            + sum_{rc, ry, rx, rg, rk} data[data_index(o, r)] * packed[oc, rc, ry, rx, rg, lane, rk]

    Written in TIR because a TE reduction starts at zero (`create_prim_func` drops a
    reduction's `init`). The update's reads are declared in the intrinsic description's
    order (C, A, B) so that tensorize matches; `start` is read by the init only."""
    cut = blocking_of(spec)
    _, _, kh, kw = spec.weight_shape
    extents = (*out_shape, cut.in_chunks, kh, kw, cut.in_chunk // DOT_INPUTS, DOT_INPUTS)
    names = [*out_names, *REDUCTION_NAMES]
    kinds = "S" * len(out_names) + "R" * len(REDUCTION_NAMES)
    with IRBuilder() as builder, T.prim_func(s_tir=True):
        T.func_name("kernel")
        handles = [T.arg(arg, T.handle()) for arg in ("d", "w", "s", "o")]
        data_buf, weight, begin, out = IRBuilder.name_many(
            ["Data", "Weight", "Start", "Out"],
            [T.match_buffer(handles[0], data.shape, data.dtype),
             T.match_buffer(handles[1], packed.shape, packed.dtype),
             T.match_buffer(handles[2], start.shape, "int32"),
             T.match_buffer(handles[3], list(out_shape), "int32")])
        with T.grid(*extents) as loops, T.sblock(name):
            IRBuilder.name_many(names, loops)
            axes = IRBuilder.name_many([f"v{n}" for n in names], T.axis.remap(kinds, loops))
            at = tuple(axes[:len(out_names)])
            named = dict(zip(out_names, at, strict=True))
            rc, ry, rx, rg, rk = axes[len(out_names):]
            oc, lane = named["oc"], named["lane"]
            pixel = data_index(named, (rc, ry, rx, rg, rk))
            tap = (oc, rc, ry, rx, rg, lane, rk)
            T.reads(out[at], data_buf[pixel], weight[tap])
            T.writes(out[at])
            with T.init():
                T.buffer_store(out, begin[oc * cut.out_block + lane], at)
            product = T.cast(data_buf[pixel], "int32") * T.cast(weight[tap], "int32")
            T.buffer_store(out, out[at] + product, at)
    return builder.get()


def dot_channel(rg: tirx.Expr, rk: tirx.Expr) -> tirx.Expr:
    """The input channel within its chunk that reduction point (rg, rk) reads."""
    return rg * DOT_INPUTS + rk
