"""TE compute of the direct convolution: a sliding window over NCHW, no data reshaping.

    out[n, o, y, x] = sum_{c, ky, kx} pad(data)[n, g(o) * Cg + c, y*sh + ky*dh, x*sw + kx*dw]
                                      * weight[o, c, ky, kx]

with g(o) = o // (O / groups) the group of output channel o and Cg = C / groups the input
channels per group (1 for depthwise). Products are accumulated in `out_dtype` (float32,
float16, or int32 for uint8/int8 inputs). Bias is not part of relax's conv2d (it is a
separate add that the compiler fuses as an epilogue), so it is not here either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

from ...tir.schedule_helpers import target_simd
from ..base import ConvSpec
from ..blocked import blocking_of, input_index, pad_stored, read_input, stored_output
from ..common import extern_stage, in_channel, pad_nchw, split_column, widen
from ..csr_kernel import CSRRowLayout, csr_row_kernel
from ..dot_conv import dot_channel, dot_conv_block
from ..int8_dot import dot_input
from ..microkernel import choose_tile, vectors_per_block
from ..spmm_kernel import spmm_stage
from ..spmm_tiling import PixelGrid, SparseTiling, plan

#: Name of the conv output stage.
CONV_NAME = "conv2d_nchw_direct"


def conv2d_nchw_direct(data: te.Tensor, weight: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The direct conv of `spec` on TE tensors `data` (NCHW) and `weight` (OIHW)."""
    _, cg, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    padded = pad_nchw(data, spec.padding)
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    acc = spec.out_dtype

    def fconv(n, o, y, x):
        pixel = padded[n, in_channel(spec, o, rc), y * sh + ry * dh, x * sw + rx * dw]
        return te.sum(widen(pixel, acc) * widen(weight[o, rc, ry, rx], acc), axis=[rc, ry, rx])

    return te.compute(spec.out_shape, fconv, name=CONV_NAME)


#: Names of the GPU form's blocks (`conv2d_nchw_direct_csr_rows`): one per (n, o) row, the
#: update inside it.
CSR_ROW_NAME = "conv2d_nchw_direct_csr_rows"
CSR_UPDATE_NAME = "conv2d_nchw_direct_csr_update"


def conv2d_nchw_direct_csr_rows(
    data: te.Tensor, val: te.Tensor, col: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """The direct conv with a CSR weight on a GPU (`dlas.algorithms.csr`), no data
    reshaping: one row kernel per (n, o), each output pixel a thread walking the row's
    non-zeros (`dlas.compiler.gpu_schedule`); the pixel-tile kernel is a CPU design.

        out[n, o, y, x] = sum_{j < ptr[o+1]-ptr[o]} val[ptr[o]+j]
                          * pad(data)[n, g(o)*Cg + c(k), y*sh + ky(k)*dh, x*sw + kx(k)*dw]

    with k = col[ptr[o]+j] a column of the (O, Cg*KH*KW) weight matrix. The reduction's
    extent comes from `ptr`, so TE cannot express a good loop order; the kernel is the
    shared CSR row kernel (`dlas.algorithms.csr_kernel`) entered through `te.extern`,
    after the TE padding stage.
    """
    padded = pad_nchw(data, spec.padding)
    return extern_stage([padded, val, col, ptr], direct_csr_kernel(spec, padded, val, col, ptr))


def direct_csr_kernel(spec: ConvSpec, padded: te.Tensor, val: te.Tensor, col: te.Tensor,
                      ptr: te.Tensor) -> tirx.PrimFunc:
    """The CSR row kernel over the padded NCHW input: per (n, o) row, the update over
    (j, y, x) reads the pixel of channel g(o)*Cg + c(k) under kernel tap (ky(k), kx(k))."""
    n, o, oh, ow = spec.out_shape
    cg = spec.weight_shape[1]
    sh, sw = spec.strides
    dh, dw = spec.dilation
    opg = spec.out_channels // spec.groups

    def index(vn: tirx.Var, vo: tirx.Var, k: tirx.Expr, _tiles: Sequence[tirx.Var],
              pixels: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        vy, vx = pixels
        c, ky, kx = split_column(spec, k)
        return vn, vo // opg * cg + c, vy * sh + ky * dh, vx * sw + kx * dw

    layout = CSRRowLayout(CSR_ROW_NAME, CSR_UPDATE_NAME, input_name="Data", tiles={},
                          pixels={"y": oh, "x": ow}, index=index)
    return csr_row_kernel(layout, (n, o), spec.out_dtype, padded, val, col, ptr)


#: Name of the direct CSR conv's output stage; its kernel's task block adds
#: `spmm_kernel.TILES_SUFFIX`.
CSR_NAME = "conv2d_nchw_direct_csr"


@dataclass(frozen=True)
class DirectCSRLayout:
    """The direct CSR conv's input: the padded NCHW input in place, rows `row` elements
    wide (the padded width, widened until a stride-sh row step is a whole number of
    stride-sw column steps), `extra` (rows, columns) of zeros beyond the conv's padding
    so every grid position's reads stay inside its channel's plane."""

    grid: PixelGrid
    extra: tuple[int, int]


def direct_csr_layout(spec: ConvSpec, padded: int) -> DirectCSRLayout:
    """The layout for `padded` grid positions (see `spmm_tiling.PixelGrid`).

    Output (y, x) is grid position q = y * width + x with width = sh * row / sw; at q, tap
    (ky, kx) reads element sw * q + ky*dh*row + kx*dw of its channel's padded plane, i.e.
    row sh*y + ky*dh, column sw*x + kx*dw. Positions with x >= OW are computed and
    dropped (the padded columns: 2 of every 34 at 32x32, 2 of 6 at 4x4).
    """
    _, _, h, w = spec.data_shape
    pt, pl, pb, pr = spec.padding
    hp, wp = h + pt + pb, w + pl + pr
    sh, sw = spec.strides
    dh, dw = spec.dilation
    kh, kw = spec.kernel_size
    _, _, oh, ow = spec.out_shape
    row = wp
    while (sh * row) % sw or sh * row // sw < ow:
        row += 1
    width = sh * row // sw
    taps = tuple(ky * dh * row + kx * dw for ky in range(kh) for kx in range(kw))
    positions = (oh - 1) * width + ow
    last = sw * (max(padded, positions) - 1) + max(taps)
    rows = max(hp, last // row + 1)
    grid = PixelGrid(positions=positions, padded=padded, width=width, stride=sw,
                     channel=rows * row, taps=taps)
    return DirectCSRLayout(grid, (rows - hp, row - wp))


def direct_csr_plan(spec: ConvSpec, weight: np.ndarray | None = None,
                    block: int | None = None) -> tuple[DirectCSRLayout, SparseTiling]:
    """The layout and tiling, from the weight (its constants) or the stored `block`."""
    grid, tiling = plan(spec, lambda padded: direct_csr_layout(spec, padded).grid, weight,
                        block)
    return direct_csr_layout(spec, grid.padded), tiling


def conv2d_nchw_direct_csr(
    data: te.Tensor, val: te.Tensor, off: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """The direct conv over the kernel's CSR constants (`spmm_kernel.sparse_rows`), no
    data reshaping: the padded input read in place by the pixel-tile kernel.

        out[n, o, y, x] = sum_{e in row o} val[e] * pad(data)_flat[n, off[e] + sw*(y*width + x)]

    with off[e] = channel(e) * plane + ky(e)*dh*row + kx(e)*dw (`direct_csr_layout`).
    """
    layout, tiling = direct_csr_plan(spec, block=int(val.shape[2]))
    padded = pad_nchw(data, spec.padding, layout.extra)
    return spmm_stage(CSR_NAME, padded, val, off, ptr, spec, layout.grid, tiling)


#: Name of the conv output stage in a vector layout (NHWC, NCHWc).
VECTOR_CONV_NAME = "conv2d_direct_vector"


def conv2d_vector_direct(data: te.Tensor, packed: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The direct conv in a vector layout: a sliding window over the stored input, no
    reshaping, the weight packed by `blocked.pack_weight`.

        out[n, oc, lane, y, x] = sum_{ic, ky, kx, il} in[n, ic, il, y*sh + ky*dh, x*sw + kx*dw]
                                 * packed[oc, ic, ky, kx, il, lane]      (groups = 1)
        out[n, c, lane, y, x] = sum_{ky, kx} in[n, c, lane, y*sh + ky*dh, x*sw + kx*dw]
                                * packed[c, ky, kx, lane]                (depthwise)

    with (chunk, lane) indexing channels as `blocked.Blocking` cuts them.
    """
    cut = blocking_of(spec)
    _, _, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    padded = pad_stored(data, spec.data_layout_, spec.padding)
    acc = spec.out_dtype
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    if cut.depthwise:
        def fdepthwise(n, c, lane, y, x):
            pixel = read_input(padded, spec, c, lane, n, y * sh + ry * dh, x * sw + rx * dw)
            return te.sum(widen(pixel, acc) * widen(packed[c, ry, rx, lane], acc),
                          axis=[ry, rx])

        return stored_output(spec, fdepthwise, VECTOR_CONV_NAME)
    rc = te.reduce_axis((0, cut.in_chunks), name="rc")
    ri = te.reduce_axis((0, cut.in_chunk), name="ri")

    def fconv(n, oc, lane, y, x):
        pixel = read_input(padded, spec, rc, ri, n, y * sh + ry * dh, x * sw + rx * dw)
        return te.sum(widen(pixel, acc) * widen(packed[oc, rc, ry, rx, ri, lane], acc),
                      axis=[rc, ry, rx, ri])

    return stored_output(spec, fconv, VECTOR_CONV_NAME)


#: Name of the int8 dot-product form's conv block (`conv2d_vector_direct_dot`).
VECTOR_DOT_NAME = "conv2d_direct_vector_dot"


def conv2d_vector_direct_dot(data: te.Tensor, packed: te.Tensor, start: te.Tensor,
                             spec: ConvSpec) -> te.Tensor:
    """The direct conv in NCHW<lanes>c over int8 data, shaped for the lanes x 4 int8 dot
    product (`dlas.algorithms.int8_dot`): the input read as uint8, the weight packed
    `[O/lanes, C/chunk, KH, KW, chunk/4, lanes, 4]`, each sum started at its channel's
    compensation `start`:

        out[n, oc, y, x, lane] = start[oc*lanes + lane]
            + sum_{ic, ky, kx, g, k} u8in[n, ic, y*sh + ky*dh, x*sw + kx*dw, 4g + k]
                                     * packed[oc, ic, ky, kx, g, lane, k]

    One block (`dot_conv.dot_conv_block`); its loops are a TE conv's
    (n, oc, y, x, lane, rc, ry, rx, rg, rk), so the micro-kernel schedules it alike.
    """
    sh, sw = spec.strides
    dh, dw = spec.dilation
    shifted = dot_input(data, spec)

    def pixel(o: dict[str, tirx.Var], r: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        rc, ry, rx, rg, rk = r
        return spec.data_layout_.chunk_index(o["n"], rc, dot_channel(rg, rk),
                                             o["y"] * sh + ry * dh, o["x"] * sw + rx * dw)

    kernel = dot_conv_block(VECTOR_DOT_NAME, spec, shifted, packed, start,
                            spec.stored_out_shape, ["n", "oc", "y", "x", "lane"], pixel)
    return extern_stage([shifted, packed, start], kernel)


#: Names of the vector-layout direct CSR kernel's blocks and its output stage.
VECTOR_CSR_ROW_NAME = "conv2d_direct_vector_csr"
VECTOR_CSR_UPDATE_NAME = "conv2d_direct_vector_csr_update"
VECTOR_CSR_OUT_NAME = "conv2d_direct_vector_csr_out"


def vector_csr_columns(spec: ConvSpec) -> int:
    """Output columns a vector CSR row computes per stored weight vector (the register
    tile's columns: loaded once, used for that many FMAs)."""
    cut = blocking_of(spec)
    simd = target_simd()
    vectors = vectors_per_block(cut.out_block, spec.out_dtype, simd)
    return choose_tile(1, spec.out_shape[3], vectors, simd).cols


@dataclass(frozen=True)
class ColumnFields:
    """Bit widths of a vector CSR column's fields (`pack_columns`), lowest first: the lane
    of the input channel within its chunk, the kernel column, the kernel row; the
    input-channel chunk takes the rest. Each field is as wide as its range needs, so an
    NHWC conv (one chunk of all C channels) and an NCHWc one pack alike."""

    lane: int
    kx: int
    ky: int

    @classmethod
    def of(cls, spec: ConvSpec) -> ColumnFields:
        kh, kw = spec.kernel_size
        return cls(lane=_bits_for(blocking_of(spec).in_chunk), kx=_bits_for(kw),
                   ky=_bits_for(kh))

    def shifts(self) -> tuple[int, int, int, int]:
        """Shift of each field: lane, kx, ky, chunk."""
        return (0, self.lane, self.lane + self.kx, self.lane + self.kx + self.ky)


def _bits_for(count: int) -> int:
    """Bits that hold 0 .. count - 1 (at least one)."""
    return max(1, (count - 1).bit_length())


def pack_columns(spec: ConvSpec, columns: np.ndarray) -> np.ndarray:
    """Weight-matrix columns k = (c, ky, kx) recoded as bit fields (chunk | ky | kx | lane
    of input channel c, `ColumnFields`), so the kernel decodes a stored column with shifts
    and masks: the divisions by KH*KW, KW and the chunk size cost more than the eight FMAs
    each stored vector feeds."""
    kh, kw = spec.kernel_size
    cut = blocking_of(spec)
    fields = ColumnFields.of(spec)
    _, s_kx, s_ky, s_chunk = fields.shifts()
    k = columns.astype(np.int64)
    c, ky, kx = k // (kh * kw), (k // kw) % kh, k % kw
    packed = ((c // cut.in_chunk) << s_chunk) | (ky << s_ky) | (kx << s_kx) | (c % cut.in_chunk)
    if packed.max(initial=0) >= 2**31:
        raise ValueError(f"too many input channels for vector CSR's column fields: {spec}")
    return packed.astype(np.int32)


def _field(k: tirx.Expr, fields: ColumnFields, index: int) -> tirx.Expr:
    """Field `index` (0 = lane, 1 = kx, 2 = ky, 3 = chunk) of a packed column."""
    shift = fields.shifts()[index]
    shifted = tirx.shift_right(k, tirx.const(shift, "int32")) if shift else k
    if index == 3:
        return shifted
    width = (fields.lane, fields.kx, fields.ky)[index]
    return tirx.bitwise_and(shifted, tirx.const((1 << width) - 1, "int32"))


def conv2d_vector_direct_csr(data: te.Tensor, val: te.Tensor, col: te.Tensor,
                             ptr: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The direct conv in a vector layout over a block-CSR weight
    (`csr.block_csr_from_weight`: rows of `out_block` output channels, each stored column a
    weight vector). Per row (n, oc), per output row y and tile of columns, the loop over
    the row's stored columns (c, ky, kx) runs outside the tile's columns and lanes:

        out[n, oc, y, x, lane] = sum_j val[ptr[oc] + j, lane]
                                 * in[n, c(k), y*sh + ky(k)*dh, x*sw + kx(k)*dw]
    """
    cut = blocking_of(spec)
    _, _, oh, ow = spec.out_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    cols = vector_csr_columns(spec)
    fields = ColumnFields.of(spec)
    padded = pad_stored(data, spec.data_layout_, spec.padding)

    def index(vn: tirx.Var, vo: tirx.Var, k: tirx.Expr, tiles: Sequence[tirx.Var],
              pixels: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        (vy, vxo), (vxi, vlane) = tiles, pixels
        h = vy * sh + _field(k, fields, 2) * dh
        w = (vxo * cols + vxi) * sw + _field(k, fields, 1) * dw
        if cut.depthwise:  # one input channel per lane: the row's own
            return input_index(spec, vo, vlane, vn, h, w)
        return input_index(spec, _field(k, fields, 3), _field(k, fields, 0), vn, h, w)

    layout = CSRRowLayout(VECTOR_CSR_ROW_NAME, VECTOR_CSR_UPDATE_NAME, input_name="Data",
                          tiles={"y": oh, "xo": ow // cols},
                          pixels={"xi": cols, "lane": cut.out_block}, index=index,
                          lanes=cut.out_block)
    rows = extern_stage([padded, val, col, ptr],
                        csr_row_kernel(layout, (spec.batch, cut.out_blocks), spec.out_dtype,
                                       padded, val, col, ptr))
    return stored_output(
        spec, lambda n, oc, lane, y, x: rows[n, oc, y, x // cols, x % cols, lane],
        VECTOR_CSR_OUT_NAME)
