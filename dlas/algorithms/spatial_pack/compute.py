"""TE computes of the spatial-pack convolution, dense and CSR (after TOPI's arm_cpu one).

Output tiles are VH x VW pixels (and VC output channels, dense only). The input is
repacked so that each output tile's receptive field is one contiguous block, halo
included:

    data_vec[n, ht, wt, c, i, j] = pad(data)[n, c, ht*VH*sh + i, wt*VW*sw + j]
        i < (VH-1)*sh + (KH-1)*dh + 1,  j < (VW-1)*sw + (KW-1)*dw + 1

Dense: the weight is packed at compile time with VC output channels innermost,
kernel_vec[ot, c, ky, kx, vc] = W[ot*VC + vc, c, ky, kx] (zero-padded to a multiple of VC),
and

    conv[n, ot, ht, wt, vh, vw, vc] = sum_{c, ky, kx} kernel_vec[ot, c, ky, kx, vc]
        * data_vec[n, ht, wt, c, vh*sh + ky*dh, vw*sw + kx*dw]

The output is unpacked to NCHW (the block the compiler tags as the conv). Output tiles
may overhang the image (the input is padded to whole tiles); the unpack drops the overhang.
Groups are not packed: grouped and depthwise convs fall back to the direct algorithm.

CSR packs the input for the pixel-tile sparse kernel instead (`PackedPlanes`): one plane
per (row phase, kernel column), so every kernel tap is a row offset into a plane and the
kernel's grid is the output itself. Groups need no packing of their own there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tvm import te, tirx

from ...tir.schedule_helpers import target_simd
from ..base import RAW_WEIGHT, ConvSpec
from ..blocked import blocking_of, pad_stored, read_input, stored_output
from ..common import extern_stage, pad_nchw, pad_rows, split_column, widen
from ..csr_kernel import CSRRowLayout, csr_row_kernel
from ..dot_conv import dot_channel, dot_conv_block
from ..int8_dot import dot_input
from ..microkernel import choose_tile, vectors_per_block
from ..spmm_kernel import spmm_stage
from ..spmm_tiling import PixelGrid, SparseTiling, plan, reads_in_place

DATA_VEC_NAME = "data_vec"
KERNEL_VEC = "kernel_vec"
CONV_NAME = "conv2d_spatial_pack"
UNPACK_NAME = "conv2d_nchw_spatial_pack"
#: Names of the CSR form's packing stage and kernel block (the conv).
CSR_PACK_NAME = "data_planes"
CSR_NAME = "conv2d_nchw_spatial_pack_csr"
#: Names of the GPU form's row block, update block and unpack stage (the conv).
CSR_ROW_NAME = "conv2d_spatial_pack_csr_rows"
CSR_UPDATE_NAME = "conv2d_spatial_pack_csr_update"
CSR_UNPACK_NAME = "conv2d_nchw_spatial_pack_csr_unpack"

#: Default tile: 16 output channels (one AVX-512 float32 register, two AVX2 ones), 2 output
#: rows and 8 output columns. Smaller convs take smaller tiles (see `tiles_for`).
MAX_VC, MAX_VH, MAX_VW = 16, 2, 8


@dataclass(frozen=True)
class Tiles:
    vc: int
    vh: int
    vw: int
    ht: int  # tiles over the output height
    wt: int
    ot: int  # tiles over the output channels (dense)
    vh_in: int  # input rows one output tile reads
    vw_in: int


def tiles_for(spec: ConvSpec) -> Tiles:
    """The fixed tiling of `spec`: deterministic, so packed weights match the compute."""
    _, o, oh, ow = spec.out_shape
    kh, kw = spec.kernel_size
    sh, sw = spec.strides
    dh, dw = spec.dilation
    vc = min(MAX_VC, 1 << (o - 1).bit_length())
    vh, vw = min(MAX_VH, oh), min(MAX_VW, ow)
    return Tiles(
        vc=vc, vh=vh, vw=vw,
        ht=math.ceil(oh / vh), wt=math.ceil(ow / vw), ot=math.ceil(o / vc),
        vh_in=(vh - 1) * sh + (kh - 1) * dh + 1,
        vw_in=(vw - 1) * sw + (kw - 1) * dw + 1,
    )


def pack_kernel(spec: ConvSpec, weight: np.ndarray) -> np.ndarray:
    """kernel_vec[ot, c, ky, kx, vc] from the OIHW weight (numpy, at compile time)."""
    t = tiles_for(spec)
    o, c, kh, kw = weight.shape
    padded = np.zeros((t.ot * t.vc, c, kh, kw), weight.dtype)
    padded[:o] = weight
    return np.ascontiguousarray(padded.reshape(t.ot, t.vc, c, kh, kw).transpose(0, 2, 3, 4, 1))


def pack_data(data: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """data_vec[n, ht, wt, c, i, j]: every output tile's receptive field, halo included."""
    t = tiles_for(spec)
    _, _, h, w = spec.data_shape
    pt, pl, pb, pr = spec.padding
    sh, sw = spec.strides
    rows = (t.ht - 1) * t.vh * sh + t.vh_in  # padded rows the last tile reaches
    cols = (t.wt - 1) * t.vw * sw + t.vw_in
    extra = (max(0, rows - (h + pt + pb)), max(0, cols - (w + pl + pr)))
    padded = pad_nchw(data, spec.padding, extra)
    shape = (spec.batch, t.ht, t.wt, spec.in_channels, t.vh_in, t.vw_in)
    return te.compute(
        shape,
        lambda n, ht, wt, c, i, j: padded[n, c, ht * t.vh * sh + i, wt * t.vw * sw + j],
        name=DATA_VEC_NAME,
    )


def conv2d_nchw_spatial_pack(data: te.Tensor, weights: dict[str, te.Tensor], spec: ConvSpec
                             ) -> te.Tensor:
    """Packed input x packed weight, then unpacked to NCHW (groups == 1)."""
    t = tiles_for(spec)
    _, c_in, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    acc = spec.out_dtype
    data_vec = pack_data(data, spec)
    if KERNEL_VEC in weights:
        kernel_vec = weights[KERNEL_VEC]
    else:  # not a constant: pack at run time (a small stage)
        raw = weights[RAW_WEIGHT]
        o_total = spec.out_channels
        zero = tirx.const(0, raw.dtype)
        kernel_vec = te.compute(
            (t.ot, c_in, kh, kw, t.vc),
            lambda ot, c, ky, kx, vc: tirx.if_then_else(
                ot * t.vc + vc < o_total, raw[ot * t.vc + vc, c, ky, kx], zero),
            name=KERNEL_VEC,
        )
    rc = te.reduce_axis((0, c_in), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    conv = te.compute(
        (spec.batch, t.ot, t.ht, t.wt, t.vh, t.vw, t.vc),
        lambda n, ot, ht, wt, vh, vw, vc: te.sum(
            widen(data_vec[n, ht, wt, rc, vh * sh + ry * dh, vw * sw + rx * dw], acc)
            * widen(kernel_vec[ot, rc, ry, rx, vc], acc),
            axis=[rc, ry, rx],
        ),
        name=CONV_NAME,
    )
    return te.compute(
        spec.out_shape,
        lambda n, o, y, x: conv[n, o // t.vc, y // t.vh, x // t.vw, y % t.vh, x % t.vw,
                                o % t.vc],
        name=UNPACK_NAME,
    )


@dataclass(frozen=True)
class PackedPlanes:
    """The CSR spatial pack's input: per input channel, one plane per (row phase a, kernel
    column kx), plane[r, x] = pad(data)[sh*r + a, sw*x + kx*dw], `rows` rows of OW. Tap
    (ky, kx) with ky*dh = sh*q + a reads its plane from row q on, so at output pixel
    (y, x) it is element q*OW + (y*OW + x): the grid is the output, and the planes hold
    only the phases some tap uses (1 of 2 for a 1x1 stride-2 conv)."""

    grid: PixelGrid
    phases: tuple[int, ...]
    rows: int


def packed_planes(spec: ConvSpec, padded: int) -> PackedPlanes:
    """The packed planes for `padded` grid positions (see `spmm_tiling.PixelGrid`)."""
    kh, kw = spec.kernel_size
    sh, _ = spec.strides
    dh, _ = spec.dilation
    _, _, oh, ow = spec.out_shape
    phases = tuple(sorted({ky * dh % sh for ky in range(kh)}))
    lead = (kh - 1) * dh // sh
    rows = -(-max(padded, oh * ow) // ow) + lead
    plane = rows * ow
    taps = tuple((phases.index(ky * dh % sh) * kw + kx) * plane + ky * dh // sh * ow
                 for ky in range(kh) for kx in range(kw))
    grid = PixelGrid(positions=oh * ow, padded=padded, width=ow, stride=1,
                     channel=len(phases) * kw * plane, taps=taps)
    if reads_in_place(spec, padded):
        grid = PixelGrid(oh * ow, padded, ow, 1, oh * ow, (0,))
    return PackedPlanes(grid, phases, rows)


def spatial_pack_csr_plan(spec: ConvSpec, weight: np.ndarray | None = None,
                          block: int | None = None) -> tuple[PackedPlanes, SparseTiling]:
    """The planes and tiling, from the weight (its constants) or the stored `block`."""
    grid, tiling = plan(spec, lambda padded: packed_planes(spec, padded).grid, weight,
                        block)
    return packed_planes(spec, grid.padded), tiling


def pack_planes(data: te.Tensor, spec: ConvSpec, planes: PackedPlanes) -> te.Tensor:
    """planes[n, c, a, kx, r, x] (see `PackedPlanes`) from a padding stage (rows past the
    image: zeros added to it)."""
    if reads_in_place(spec, planes.grid.padded):
        return data
    _, kw = spec.kernel_size
    sh, sw = spec.strides
    _, dw = spec.dilation
    _, _, _, ow = spec.out_shape
    phases = planes.phases
    needed = (planes.rows - 1) * sh + max(phases) + 1
    padded = pad_rows(data, spec, needed)

    def phase(a: tirx.Var) -> tirx.Expr:
        value: tirx.Expr = tirx.const(phases[-1], "int32")
        for index in range(len(phases) - 2, -1, -1):
            value = tirx.Select(a == index, tirx.const(phases[index], "int32"), value)
        return value

    shape = (spec.batch, spec.in_channels, len(phases), kw, planes.rows, ow)
    return te.compute(
        shape,
        lambda n, c, a, kx, r, x: padded[n, c, r * sh + phase(a), x * sw + kx * dw],
        name=CSR_PACK_NAME)


def conv2d_nchw_spatial_pack_csr(
    data: te.Tensor, val: te.Tensor, off: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """The input packed into planes (`PackedPlanes`), multiplied by the CSR weight rows
    with the pixel-tile sparse kernel (`dlas.algorithms.spmm_kernel`); every conv kind
    (a row's offsets name its group's channels)."""
    planes, tiling = spatial_pack_csr_plan(spec, block=int(val.shape[2]))
    return spmm_stage(CSR_NAME, pack_planes(data, spec, planes), val, off, ptr, spec,
                      planes.grid, tiling)


def conv2d_nchw_spatial_pack_csr_rows(
    data: te.Tensor, val: te.Tensor, col: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """Packed input x CSR weight rows on a GPU, then unpacked to NCHW (groups == 1): one
    row kernel per (n, o), each tile pixel a thread walking the row's non-zeros
    (`dlas.compiler.gpu_schedule`; the pixel-tile kernel is a CPU design)."""
    t = tiles_for(spec)
    data_vec = pack_data(data, spec)
    tiles = extern_stage([data_vec, val, col, ptr],
                         spatial_pack_csr_kernel(spec, data_vec, val, col, ptr))
    return te.compute(
        spec.out_shape,
        lambda n, o, y, x: tiles[n, o, y // t.vh, x // t.vw, y % t.vh, x % t.vw],
        name=CSR_UNPACK_NAME,
    )


def spatial_pack_csr_kernel(spec: ConvSpec, data_vec: te.Tensor, val: te.Tensor,
                            col: te.Tensor, ptr: te.Tensor) -> tirx.PrimFunc:
    """The CSR row kernel over the packed input: per (n, o) row and tile (ht, wt), the
    row's non-zeros, then the tile's pixels (vh, vw); output in tiles, unpacked later."""
    t = tiles_for(spec)
    sh, sw = spec.strides
    dh, dw = spec.dilation

    def index(vn: tirx.Var, _vo: tirx.Var, k: tirx.Expr, tiles: Sequence[tirx.Var],
              pixels: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        (vht, vwt), (vvh, vvw) = tiles, pixels
        c, ky, kx = split_column(spec, k)
        return vn, vht, vwt, c, vvh * sh + ky * dh, vvw * sw + kx * dw

    layout = CSRRowLayout(CSR_ROW_NAME, CSR_UPDATE_NAME, input_name="Dv",
                          tiles={"ht": t.ht, "wt": t.wt}, pixels={"vh": t.vh, "vw": t.vw},
                          index=index)
    return csr_row_kernel(layout, (spec.batch, spec.out_channels), spec.out_dtype, data_vec,
                          val, col, ptr)


#: Names of the vector-layout spatial pack's stages.


#: Names of the vector-layout spatial pack's stages.
VECTOR_DATA_VEC_NAME = "data_vec_vector"
VECTOR_CONV_NAME = "conv2d_spatial_pack_vector_tiles"
VECTOR_UNPACK_NAME = "conv2d_spatial_pack_vector"
#: Name of the int8 dot-product form's tile block (`conv2d_vector_spatial_pack_dot`).
VECTOR_DOT_TILES_NAME = "conv2d_spatial_pack_vector_dot_tiles"


@dataclass(frozen=True)
class VectorTiles:
    """A vector-layout spatial pack's output tile: `oc_inner` channel vectors x vh x vw
    pixels (all in registers), and the input window one tile reads."""

    oc_inner: int
    vh: int
    vw: int
    ht: int
    wt: int
    vh_in: int
    vw_in: int


def vector_tiles_for(spec: ConvSpec) -> VectorTiles:
    """The 2-d tile of least loads per FMA in the register budget (`microkernel`): two
    output rows where the height is even (the packing's point: a tile's window reused
    down rows as well as across), columns and channel vectors to fill the registers;
    sizes divide the output (no overhanging tiles)."""
    cut = blocking_of(spec)
    simd = target_simd()
    vectors = vectors_per_block(cut.out_block, spec.out_dtype, simd)
    _, _, oh, ow = spec.out_shape
    vh = 2 if oh % 2 == 0 else 1
    tile = choose_tile(cut.out_blocks, ow, vectors * vh, simd)
    kh, kw = spec.kernel_size
    sh, sw = spec.strides
    dh, dw = spec.dilation
    return VectorTiles(
        oc_inner=tile.oc_inner, vh=vh, vw=tile.cols, ht=oh // vh, wt=ow // tile.cols,
        vh_in=(vh - 1) * sh + (kh - 1) * dh + 1, vw_in=(tile.cols - 1) * sw + (kw - 1) * dw + 1)


def conv2d_vector_spatial_pack(data: te.Tensor, packed: te.Tensor, spec: ConvSpec
                               ) -> te.Tensor:
    """Spatial pack in a vector layout (groups == 1): the stored input repacked so each
    tile's window (halo included) is contiguous, the tile product with the packed weight
    (`blocked.pack_weight`), then the tiles written in the output layout:

        data_vec[n, ht, wt, ic, i, j, il] = in[n, ic, il, ht*vh*sh + i, wt*vw*sw + j]
        tiles[n, oc, ht, wt, vh, vw, lane] = sum_{ic, ky, kx, il} packed[oc, ic, ky, kx, il, lane]
            * data_vec[n, ht, wt, ic, vh*sh + ky*dh, vw*sw + kx*dw, il]
    """
    cut = blocking_of(spec)
    t = vector_tiles_for(spec)
    _, _, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    acc = spec.out_dtype
    data_vec = pack_vector_data(pad_stored(data, spec.data_layout_, spec.padding), spec)
    rc = te.reduce_axis((0, cut.in_chunks), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    ri = te.reduce_axis((0, cut.in_chunk), name="ri")
    tiles = te.compute(
        (spec.batch, cut.out_blocks, t.ht, t.wt, t.vh, t.vw, cut.out_block),
        lambda n, oc, ht, wt, vh, vw, lane: te.sum(
            widen(data_vec[n, ht, wt, rc, vh * sh + ry * dh, vw * sw + rx * dw, ri], acc)
            * widen(packed[oc, rc, ry, rx, ri, lane], acc), axis=[rc, ry, rx, ri]),
        name=VECTOR_CONV_NAME)
    return unpack_vector_tiles(tiles, spec)


def pack_vector_data(padded: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The padded stored input repacked so each output tile's window (halo included) is
    contiguous: data_vec[n, ht, wt, ic, i, j, il]."""
    cut = blocking_of(spec)
    t = vector_tiles_for(spec)
    sh, sw = spec.strides
    return te.compute(
        (spec.batch, t.ht, t.wt, cut.in_chunks, t.vh_in, t.vw_in, cut.in_chunk),
        lambda n, ht, wt, ic, i, j, il: read_input(
            padded, spec, ic, il, n, ht * t.vh * sh + i, wt * t.vw * sw + j),
        name=VECTOR_DATA_VEC_NAME)


def unpack_vector_tiles(tiles: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The tiles [n, oc, ht, wt, vh, vw, lane] written in the output layout (the block
    the compiler tags as the conv, where the epilogue goes)."""
    t = vector_tiles_for(spec)
    return stored_output(
        spec, lambda n, oc, lane, y, x: tiles[n, oc, y // t.vh, x // t.vw, y % t.vh,
                                             x % t.vw, lane],
        VECTOR_UNPACK_NAME)


def conv2d_vector_spatial_pack_dot(data: te.Tensor, packed: te.Tensor, start: te.Tensor,
                                   spec: ConvSpec) -> te.Tensor:
    """Spatial pack in NCHW<lanes>c over int8 data, shaped for the lanes x 4 int8 dot
    product (`dlas.algorithms.dot_conv`): the input shifted to uint8 as it is padded and
    packed into tiles, times the weight packed `[O/lanes, C/chunk, KH, KW, chunk/4,
    lanes, 4]`, each sum started at its channel's compensation `start`:

        tiles[n, oc, ht, wt, vh, vw, lane] = start[oc*lanes + lane]
            + sum_{ic, ky, kx, g, k} data_vec[n, ht, wt, ic, vh*sh + ky*dh, vw*sw + kx*dw, 4g + k]
                                     * packed[oc, ic, ky, kx, g, lane, k]
    """
    cut = blocking_of(spec)
    t = vector_tiles_for(spec)
    sh, sw = spec.strides
    dh, dw = spec.dilation
    data_vec = pack_vector_data(dot_input(data, spec), spec)

    def window(o: dict[str, tirx.Var], r: Sequence[tirx.Var]) -> tuple[tirx.Expr, ...]:
        rc, ry, rx, rg, rk = r
        return (o["n"], o["ht"], o["wt"], rc, o["vh"] * sh + ry * dh, o["vw"] * sw + rx * dw,
                dot_channel(rg, rk))

    shape = (spec.batch, cut.out_blocks, t.ht, t.wt, t.vh, t.vw, cut.out_block)
    kernel = dot_conv_block(VECTOR_DOT_TILES_NAME, spec, data_vec, packed, start, shape,
                            ["n", "oc", "ht", "wt", "vh", "vw", "lane"], window)
    return unpack_vector_tiles(extern_stage([data_vec, packed, start], kernel), spec)
