"""TE computes of the GEMM convolution (im2col + matrix multiplication), dense and CSR.

im2col lays the input out as the (Cg*KH*KW) x (OH*OW) matrix of every receptive field,
per image and group:

    col[n, g, k, p] = pad(data)[n, g*Cg + c(k), y(p)*sh + ky(k)*dh, x(p)*sw + kx(k)*dw]

with k = (c, ky, kx) in row-major OIHW order and p = y*OW + x. The convolution is then
the matrix product of the weight reshaped to (O, Cg*KH*KW) with that matrix, group by
group (a grouped conv is a batch of GEMMs; depthwise is the degenerate K = KH*KW case):

    out[n, o, p] = sum_k W[o, k] * col[n, g(o), k, p]

The pixel index p is stored split as (y, x): the same bytes as the flat (K, OH*OW) matrix,
but the copy's inner loop is a plain (strided) row read instead of a per-element division,
which made im2col alone as slow as the whole direct conv. NCHW output *is* the
(O, OH*OW) result matrix in memory, so the product writes straight into it. The weight
matrix is reshaped at compile time when the weight is a constant (`weight_2d`), and by
index arithmetic on the OIHW weight otherwise.
The CSR form multiplies an im2col matrix whose rows hold whole kernel tiles by the CSR
weight matrix, with the pixel-tile sparse kernel (`dlas.algorithms.spmm_kernel`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tvm import te, tirx

from ..base import RAW_WEIGHT, ConvSpec
from ..blocked import blocking_of, pad_stored, read_input, stored_output
from ..common import extern_stage, pad_nchw, pad_rows, reduction_size, split_column, widen
from ..csr_kernel import CSRRowLayout, csr_row_kernel
from ..dot_conv import dot_channel, dot_conv_block
from ..int8_dot import dot_input
from ..spmm_kernel import spmm_stage
from ..spmm_tiling import PixelGrid, SparseTiling, plan, reads_in_place

IM2COL_NAME = "im2col"
GEMM_NAME = "conv2d_nchw_gemm"
WEIGHT_2D = "weight_2d"
#: Name of the CSR form's kernel block (the conv).
CSR_NAME = "conv2d_nchw_gemm_csr"
#: Names of the GPU form's row block and its update block.
CSR_ROW_NAME = "conv2d_nchw_gemm_csr_rows"
CSR_UPDATE_NAME = "conv2d_nchw_gemm_csr_update"


def im2col(data: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The (N, groups, Cg*KH*KW, OH, OW) receptive-field matrix of `data` (p split as y, x)."""
    _, cg, _, _ = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    _, _, oh, ow = spec.out_shape
    padded = pad_nchw(data, spec.padding)

    def fcol(n, g, k, y, x):
        c, ky, kx = split_column(spec, k)
        channel = c if spec.groups == 1 else g * cg + c
        return padded[n, channel, y * sh + ky * dh, x * sw + kx * dw]

    shape = (spec.batch, spec.groups, reduction_size(spec), oh, ow)
    return te.compute(shape, fcol, name=IM2COL_NAME)


def conv2d_nchw_gemm(data: te.Tensor, weights: dict[str, te.Tensor], spec: ConvSpec
                     ) -> te.Tensor:
    """im2col then (O, K) x (K, OH*OW) per group; `weights` holds weight_2d or the raw weight."""
    col = im2col(data, spec)
    opg = spec.out_channels // spec.groups
    k = te.reduce_axis((0, reduction_size(spec)), name="k")
    acc = spec.out_dtype
    if WEIGHT_2D in weights:
        w2d = weights[WEIGHT_2D]

        def weight(o, kk):
            return w2d[o, kk]
    else:
        raw = weights[RAW_WEIGHT]

        def weight(o, kk):
            c, ky, kx = split_column(spec, kk)
            return raw[o, c, ky, kx]

    def fgemm(n, o, y, x):
        g = 0 if spec.groups == 1 else o // opg
        return te.sum(widen(weight(o, k), acc) * widen(col[n, g, k, y, x], acc), axis=k)

    return te.compute(spec.out_shape, fgemm, name=GEMM_NAME)


def conv2d_nchw_gemm_csr_rows(
    data: te.Tensor, val: te.Tensor, col_idx: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """im2col then the CSR weight matrix times it on a GPU: one row kernel per (n, o),
    each output pixel a thread walking the row's non-zeros (`dlas.compiler.gpu_schedule`;
    the pixel-tile kernel is a CPU design)."""
    col = im2col(data, spec)
    return extern_stage([col, val, col_idx, ptr], gemm_csr_kernel(spec, col, val, col_idx, ptr))


def gemm_csr_kernel(spec: ConvSpec, colmat: te.Tensor, val: te.Tensor, col: te.Tensor,
                    ptr: te.Tensor) -> tirx.PrimFunc:
    """The CSR row kernel over the im2col matrix: per (n, o) row,
    out[n, o, :] += val[e] * im2col[n, g(o), col[e], :]."""
    n, o, oh, ow = spec.out_shape
    opg = spec.out_channels // spec.groups

    def index(vn: tirx.Var, vo: tirx.Var, k: tirx.Expr, _tiles: Sequence[tirx.Var],
              pixels: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        vy, vx = pixels
        return vn, vo // opg, k, vy, vx

    layout = CSRRowLayout(CSR_ROW_NAME, CSR_UPDATE_NAME, input_name="Mat", tiles={},
                          pixels={"y": oh, "x": ow}, index=index)
    return csr_row_kernel(layout, (n, o), spec.out_dtype, colmat, val, col, ptr)


#: Name of the CSR form's im2col stage (rows padded to whole kernel tiles).
CSR_IM2COL_NAME = "im2col_csr"


def gemm_csr_layout(spec: ConvSpec, padded: int) -> PixelGrid:
    """The im2col matrix as the sparse kernel reads it (`spmm_tiling.PixelGrid`): row
    (c, ky, kx) of the (C*KH*KW) x (rows*OW) matrix holds that tap's input at every output
    pixel, rows = whole grid rows of `padded` positions; the grid is the output, exactly.
    A 1x1 stride-1 unpadded conv whose tiles end with the image reads its input in place.
    """
    kh, kw = spec.kernel_size
    _, _, oh, ow = spec.out_shape
    positions = oh * ow
    if reads_in_place(spec, padded):
        return PixelGrid(positions, padded, ow, 1, positions, (0,))
    plane = -(-max(padded, positions) // ow) * ow
    return PixelGrid(positions=positions, padded=padded, width=ow, stride=1,
                     channel=kh * kw * plane, taps=tuple(t * plane for t in range(kh * kw)))


def im2col_csr(data: te.Tensor, spec: ConvSpec, grid: PixelGrid) -> te.Tensor:
    """im2col[n, c, ky, kx, r, x] = pad(data)[n, c, r*sh + ky*dh, x*sw + kx*dw] for whole
    grid rows r (rows past the output read zero rows added to the padding, or garbage
    that no output keeps). The padding is its own stage: inlined, its four bounds tests
    per element cost 6x the copy (66 against 10 us on a 64-channel 16x16 conv)."""
    if reads_in_place(spec, grid.padded):
        return data
    kh, kw = spec.kernel_size
    sh, sw = spec.strides
    dh, dw = spec.dilation
    _, _, _, ow = spec.out_shape
    rows = grid.channel // (kh * kw * ow)
    needed = (rows - 1) * sh + (kh - 1) * dh + 1
    padded = pad_rows(data, spec, needed)
    shape = (spec.batch, spec.in_channels, kh, kw, rows, ow)
    return te.compute(
        shape,
        lambda n, c, ky, kx, r, x: padded[n, c, r * sh + ky * dh, x * sw + kx * dw],
        name=CSR_IM2COL_NAME)


def conv2d_nchw_gemm_csr(
    data: te.Tensor, val: te.Tensor, off: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """im2col, then the CSR weight matrix times it by the pixel-tile sparse kernel
    (sparse x dense, XNNPACK's SpMM): out[n, o, p] = sum_{e in row o} val[e] *
    im2col[n, k(e), p], k(e) folded into the offset (`gemm_csr_layout`)."""
    grid, tiling = gemm_csr_plan(spec, block=int(val.shape[2]))
    return spmm_stage(CSR_NAME, im2col_csr(data, spec, grid), val, off, ptr, spec, grid,
                      tiling)


def gemm_csr_plan(spec: ConvSpec, weight: np.ndarray | None = None,
                  block: int | None = None) -> tuple[PixelGrid, SparseTiling]:
    """The grid and tiling, from the weight (its constants) or the stored `block`."""
    return plan(spec, lambda padded: gemm_csr_layout(spec, padded), weight, block)


#: Names of the vector-layout GEMM's stages.
VECTOR_IM2COL_NAME = "im2col_vector"
VECTOR_GEMM_NAME = "conv2d_gemm_vector"
#: Name of the int8 dot-product form's product block (`conv2d_vector_gemm_dot`).
VECTOR_GEMM_DOT_NAME = "conv2d_gemm_vector_dot"


def im2col_vector(data: te.Tensor, spec: ConvSpec, padded: te.Tensor | None = None
                  ) -> te.Tensor:
    """Every output pixel's receptive field as one contiguous row, from the stored input
    (or from `padded`, the input already padded, e.g. shifted for the int8 dot product).

    Plain convs: col[n, y, x, ic, ky, kx, il] (stored as the (N, OH, OW) x K matrix, K
    ordered as the packed weight's); the layout's channel runs `il` are copied whole, and
    no index is divided. Depthwise: col[n, c, y, x, ky, kx, lane], K = KH * KW per channel.
    """
    cut = blocking_of(spec)
    _, _, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    _, _, oh, ow = spec.out_shape
    if padded is None:
        padded = pad_stored(data, spec.data_layout_, spec.padding)
    if cut.depthwise:
        return te.compute(
            (spec.batch, cut.out_blocks, oh, ow, kh, kw, cut.out_block),
            lambda n, c, y, x, ky, kx, lane: read_input(
                padded, spec, c, lane, n, y * sh + ky * dh, x * sw + kx * dw),
            name=VECTOR_IM2COL_NAME)
    return te.compute(
        (spec.batch, oh, ow, cut.in_chunks, kh, kw, cut.in_chunk),
        lambda n, y, x, ic, ky, kx, il: read_input(
            padded, spec, ic, il, n, y * sh + ky * dh, x * sw + kx * dw),
        name=VECTOR_IM2COL_NAME)


def conv2d_vector_gemm(data: te.Tensor, packed: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """im2col, then the (pixels x K) matrix times the packed (K x O) weight, written in
    the output layout: out[n, oc, lane, y, x] = sum_k col[n, y, x, k] * packed[oc, k, lane]
    (depthwise: per channel, over its K = KH * KW taps)."""
    cut = blocking_of(spec)
    _, _, kh, kw = spec.weight_shape
    col = im2col_vector(data, spec)
    acc = spec.out_dtype
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    if cut.depthwise:
        def fdepthwise(n, c, lane, y, x):
            return te.sum(widen(col[n, c, y, x, ry, rx, lane], acc)
                          * widen(packed[c, ry, rx, lane], acc), axis=[ry, rx])

        return stored_output(spec, fdepthwise, VECTOR_GEMM_NAME)
    rc = te.reduce_axis((0, cut.in_chunks), name="rc")
    ri = te.reduce_axis((0, cut.in_chunk), name="ri")

    def fgemm(n, oc, lane, y, x):
        return te.sum(widen(col[n, y, x, rc, ry, rx, ri], acc)
                      * widen(packed[oc, rc, ry, rx, ri, lane], acc), axis=[rc, ry, rx, ri])

    return stored_output(spec, fgemm, VECTOR_GEMM_NAME)


def conv2d_vector_gemm_dot(data: te.Tensor, packed: te.Tensor, start: te.Tensor,
                           spec: ConvSpec) -> te.Tensor:
    """The GEMM conv in NCHW<lanes>c over int8 data, shaped for the lanes x 4 int8 dot
    product (`dlas.algorithms.dot_conv`): im2col of the input shifted to uint8, times the
    weight packed `[O/lanes, C/chunk, KH, KW, chunk/4, lanes, 4]` (K's order, in groups
    of 4), each sum started at its channel's compensation `start`:

        out[n, oc, y, x, lane] = start[oc*lanes + lane]
            + sum_{ic, ky, kx, g, k} col[n, y, x, ic, ky, kx, 4g + k]
                                     * packed[oc, ic, ky, kx, g, lane, k]
    """
    col = im2col_vector(data, spec, padded=dot_input(data, spec))

    def row(o: dict[str, tirx.Var], r: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        rc, ry, rx, rg, rk = r
        return o["n"], o["y"], o["x"], rc, ry, rx, dot_channel(rg, rk)

    kernel = dot_conv_block(VECTOR_GEMM_DOT_NAME, spec, col, packed, start,
                            spec.stored_out_shape, ["n", "oc", "y", "x", "lane"], row)
    return extern_stage([col, packed, start], kernel)
