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

import numpy as np
from tvm import te, tirx

from ...tir.schedule_helpers import target_simd
from ..base import ConvSpec
from ..blocked import blocking_of, input_index, pad_stored, read_input, stored_output
from ..common import extern_stage, in_channel, pad_nchw, split_column, widen
from ..csr_kernel import CSRRowLayout, csr_row_kernel
from ..microkernel import choose_tile, vectors_per_block

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


#: Names of the direct CSR kernel's blocks: one per (n, o) row, the update inside it.
CSR_ROW_NAME = "conv2d_nchw_direct_csr"
CSR_UPDATE_NAME = "conv2d_nchw_direct_csr_update"


def conv2d_nchw_direct_csr(
    data: te.Tensor, val: te.Tensor, col: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """The direct conv with a CSR weight (see `dlas.algorithms.csr`), no data reshaping.

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


#: Bits per field of a vector CSR column (`pack_columns`): lane, kernel column, kernel
#: row, then the input-channel chunk in the rest.
COLUMN_FIELD_BITS = 6


def pack_columns(spec: ConvSpec, columns: np.ndarray) -> np.ndarray:
    """Weight-matrix columns k = (c, ky, kx) recoded as bit fields (chunk | ky | kx | lane
    of input channel c, 6 bits each but the chunk), so the kernel decodes a stored column
    with shifts and masks: the divisions by KH*KW, KW and the chunk size cost more than
    the eight FMAs each stored vector feeds."""
    kh, kw = spec.kernel_size
    cut = blocking_of(spec)
    limit = 1 << COLUMN_FIELD_BITS
    if max(kh, kw, cut.in_chunk) > limit:
        raise ValueError(f"vector CSR packs kernel taps and channel runs into "
                         f"{COLUMN_FIELD_BITS} bits: {spec}")
    k = columns.astype(np.int64)
    c, ky, kx = k // (kh * kw), (k // kw) % kh, k % kw
    bits = COLUMN_FIELD_BITS
    packed = ((((c // cut.in_chunk) << bits | ky) << bits | kx) << bits) | (c % cut.in_chunk)
    if packed.max(initial=0) >= 2**31:
        raise ValueError(f"too many input channels for vector CSR's column fields: {spec}")
    return packed.astype(np.int32)


def _field(k: tirx.Expr, index: int) -> tirx.Expr:
    """Field `index` (0 = lane, 1 = kx, 2 = ky, 3 = chunk) of a packed column."""
    shifted = tirx.shift_right(k, tirx.const(COLUMN_FIELD_BITS * index, "int32")) \
        if index else k
    if index == 3:
        return shifted
    return tirx.bitwise_and(shifted, tirx.const((1 << COLUMN_FIELD_BITS) - 1, "int32"))


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
    padded = pad_stored(data, spec.data_layout_, spec.padding)

    def index(vn: tirx.Var, vo: tirx.Var, k: tirx.Expr, tiles: Sequence[tirx.Var],
              pixels: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        (vy, vxo), (vxi, vlane) = tiles, pixels
        h = vy * sh + _field(k, 2) * dh
        w = (vxo * cols + vxi) * sw + _field(k, 1) * dw
        if cut.depthwise:  # one input channel per lane: the row's own
            return input_index(spec, vo, vlane, vn, h, w)
        return input_index(spec, _field(k, 3), _field(k, 0), vn, h, w)

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
