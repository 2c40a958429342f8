"""TE pieces every algorithm shares in the vector layouts (NHWC and NCHWc).

In these layouts an output pixel's channels are contiguous in runs of `out_block`
channels, one SIMD vector (NCHWc's block, or NHWC's channels cut into vectors). Each
algorithm's compute writes its output through `stored_output`, indexed by (output-channel
chunk, lane, row, column), and reads its input through `read_input` by (input-channel
chunk, lane, row, column): so direct, GEMM and spatial pack differ only in what they
compute between the two, as in the paper, and one register-tiled schedule
(`dlas.algorithms.microkernel`) fits them all.

Weights are packed once, at compile time, so the innermost `out_block` output channels
are contiguous: `[O / out_block, C / in_chunk, KH, KW, in_chunk, out_block]` for a plain
conv (one vector load per (input channel, tap) feeds `out_block` outputs), and
`[C / out_block, KH, KW, out_block]` for a depthwise one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tvm import te, tirx
from tvm.runtime import DataType

from ..tir.layout import LAYOUT_KINDS, DataLayout
from ..tir.schedule_helpers import target_simd
from .base import ConvSpec

#: Name of the packed weight input of every vector-layout algorithm.
PACKED_WEIGHT = "weight_packed"
#: Name of the padding stage in a stored layout (the same role as NCHW's `data_pad`).
PAD_NAME = "data_pad"


@dataclass(frozen=True)
class Blocking:
    """How a conv in a vector layout is cut: input chunks and output vector blocks."""

    #: Input channels per innermost run: NCHWc's block, all of them (NHWC), one (NCHW).
    in_chunk: int
    in_chunks: int
    #: Output channels per vector block, and how many blocks.
    out_block: int
    out_blocks: int
    depthwise: bool


def vector_lanes_for(dtype: str) -> int:
    """SIMD lanes of the current target for `dtype` (accumulator dtypes: 32-bit, fp16)."""
    return max(target_simd().bits // DataType(dtype).bits, 1)


def out_block_of(spec: ConvSpec) -> int:
    """Output channels per vector: NCHWc's block; in NHWC the largest power of two up to
    the target's lanes that divides the output channels (no tail vectors)."""
    layout = spec.out_layout_
    if layout.kind == "NCHWc":
        return layout.block
    lanes = vector_lanes_for(spec.out_dtype)
    block = 1
    while block * 2 <= lanes and spec.out_channels % (block * 2) == 0:
        block *= 2
    return block


def blocking_of(spec: ConvSpec) -> Blocking:
    """The cut of `spec` (see `Blocking`); depthwise convs chunk their input like their
    output, one channel per lane."""
    out_block = out_block_of(spec)
    depthwise = spec.groups > 1
    if depthwise:
        return Blocking(out_block, spec.in_channels // out_block, out_block,
                        spec.out_channels // out_block, True)
    chunk = spec.data_layout_.chunk_size(spec.in_channels)
    return Blocking(chunk, spec.in_channels // chunk, out_block,
                    spec.out_channels // out_block, False)


def vector_layout_reason(spec: ConvSpec) -> str | None:
    """Why `spec` has no vector-layout form here (None when it has one)."""
    if spec.is_nchw:
        return "NCHW: not a vector layout"
    if spec.groups > 1:
        if not (spec.groups == spec.in_channels == spec.out_channels):
            return "grouped convs other than depthwise have no vector-layout form"
        if spec.data_layout != spec.out_layout:
            return "a depthwise conv reads and writes one layout"
    if spec.out_layout_.kind == "NCHW":
        return "vector-layout convs write NHWC or NCHWc"
    return None


def pack_weight(spec: ConvSpec, weight: np.ndarray) -> np.ndarray:
    """The OIHW weight in the packed order of `spec`'s blocking (numpy, compile time)."""
    cut = blocking_of(spec)
    o, c, kh, kw = weight.shape
    if cut.depthwise:
        packed = weight.reshape(cut.out_blocks, cut.out_block, kh, kw).transpose(0, 2, 3, 1)
    else:
        packed = weight.reshape(cut.out_blocks, cut.out_block, cut.in_chunks, cut.in_chunk,
                                kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(packed)


def pad_stored(data: te.Tensor, layout: DataLayout, padding: tuple[int, int, int, int],
               extra: tuple[int, int] = (0, 0),
               convert: Callable[[tirx.Expr], tirx.Expr] | None = None) -> te.Tensor:
    """Zero-pad the H and W axes of a stored tensor (no-op without padding); `extra`
    adds rows/columns at the bottom/right for tiles that overhang the image. `convert`
    maps every element, padding included, in the same stage (always a stage then: the
    int8 dot product's shift to uint8)."""
    pt, pl, pb, pr = padding
    pb, pr = pb + extra[0], pr + extra[1]
    if not any((pt, pl, pb, pr)) and convert is None:
        return data
    hy, wx = layout.spatial_axes
    shape = [int(v) for v in data.shape]
    h, w = shape[hy], shape[wx]
    shape[hy], shape[wx] = h + pt + pb, w + pl + pr
    zero = tirx.const(0, data.dtype)

    def fpad(*idx: tirx.Var) -> tirx.Expr:
        yi, xi = idx[hy], idx[wx]
        src = list(idx)
        src[hy], src[wx] = yi - pt, xi - pl
        inside = tirx.all(yi >= pt, yi < pt + h, xi >= pl, xi < pl + w)
        value = tirx.if_then_else(inside, data[tuple(src)], zero)
        return value if convert is None else convert(value)

    return te.compute(tuple(shape), fpad, name=PAD_NAME)


def input_index(spec: ConvSpec, chunk: tirx.Expr, lane: tirx.Expr, n: tirx.Expr,
                h: tirx.Expr, w: tirx.Expr) -> tuple[tirx.Expr, ...]:
    """Stored index of input channel `chunk * chunk + lane` at row h, column w.

    Plain convs chunk by the layout's runs (`Blocking.in_chunk`); depthwise convs by the
    output vector block, so one lane reads its own channel.
    """
    layout = spec.data_layout_
    cut = blocking_of(spec)
    if cut.depthwise and layout.kind == "NHWC":
        return n, h, w, chunk * cut.out_block + lane
    return layout.chunk_index(n, chunk, lane, h, w)


def read_input(padded: te.Tensor, spec: ConvSpec, chunk: tirx.Expr, lane: tirx.Expr,
               n: tirx.Expr, h: tirx.Expr, w: tirx.Expr) -> tirx.Expr:
    """The (padded) input element `input_index` names."""
    return padded[input_index(spec, chunk, lane, n, h, w)]


#: (n, output-channel chunk, lane, row, column) -> the output element's value.
OutputFn = Callable[[tirx.Var, tirx.Expr, tirx.Expr, tirx.Var, tirx.Var],
                    tirx.Expr]


def stored_output(spec: ConvSpec, value: OutputFn, name: str) -> te.Tensor:
    """The conv's output stage in `spec.out_layout`: NCHWc loops (n, oc, y, x, lane),
    NHWC loops (n, y, x, o) with o = chunk * out_block + lane."""
    layout = spec.out_layout_
    cut = blocking_of(spec)
    if layout.kind == "NCHWc":
        return te.compute(spec.stored_out_shape,
                          lambda n, oc, y, x, ob: value(n, oc, ob, y, x), name=name)
    if layout.kind == "NHWC":
        bo = cut.out_block
        return te.compute(spec.stored_out_shape,
                          lambda n, y, x, o: value(n, o // bo, o % bo, y, x), name=name)
    raise ValueError(f"vector-layout convs write NHWC or NCHWc, not {layout.name}")


class VectorLayouts:
    """Mixin of a dense `ConvAlgorithm` that also computes in NHWC and NCHWc: the layout
    check and the weight packed once, at compile time. The algorithm's NCHW weight form,
    if any, comes from `nchw_weight_constants`."""

    layouts = frozenset(LAYOUT_KINDS)

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        if not spec.is_nchw:
            reason = vector_layout_reason(spec)
            if reason is not None:
                return reason
        return super().unsupported_reason(spec)  # type: ignore[misc]

    def weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                         ) -> dict[str, np.ndarray] | None:
        if spec.is_nchw:
            return self.nchw_weight_constants(spec, weight_value)
        if weight_value is None:
            raise ValueError(f"{spec.out_layout} convs need the weight at compile time")
        return {PACKED_WEIGHT: pack_weight(spec, weight_value)}

    def nchw_weight_constants(self, spec: ConvSpec, weight_value: np.ndarray | None
                              ) -> dict[str, np.ndarray] | None:
        """The NCHW form's compile-time weight arrays (None: the raw OIHW weight)."""
        return None
