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

CSR: the weight rows stay per output channel (the CSR matrix), over the same packed input:

    conv[n, o, ht, wt, vh, vw] = sum_e val[e] * data_vec[n, ht, wt, c(k), vh*sh + ky(k)*dh,
                                                  vw*sw + kx(k)*dw],  k = col[e]

The output is unpacked to NCHW (the block the compiler tags as the conv). Output tiles
may overhang the image (the input is padded to whole tiles); the unpack drops the overhang.
Groups are not packed: grouped and depthwise convs fall back to the direct algorithm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tvm import te, tirx
from tvm.script import tirx as T

from ..base import RAW_WEIGHT, ConvSpec
from ..common import extern_stage, pad_nchw, widen

DATA_VEC_NAME = "data_vec"
KERNEL_VEC = "kernel_vec"
CONV_NAME = "conv2d_spatial_pack"
UNPACK_NAME = "conv2d_nchw_spatial_pack"
CSR_ROW_NAME = "conv2d_spatial_pack_csr"
CSR_UPDATE_NAME = "conv2d_spatial_pack_csr_update"
CSR_UNPACK_NAME = "conv2d_nchw_spatial_pack_csr"

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


def conv2d_nchw_spatial_pack_csr(
    data: te.Tensor, val: te.Tensor, col: te.Tensor, ptr: te.Tensor, spec: ConvSpec
) -> te.Tensor:
    """Packed input x CSR weight rows, then unpacked to NCHW (groups == 1)."""
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
    """TIR of the CSR spatial pack: per (n, o) row, for each tile, sum over the row's entries."""
    t = tiles_for(spec)
    n_, o_ = spec.batch, spec.out_channels
    _, _, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    khw = kh * kw
    ht_, wt_, vh_, vw_ = t.ht, t.wt, t.vh, t.vw
    c_, hi_, wi_ = spec.in_channels, t.vh_in, t.vw_in
    nnz = int(val.shape[0])
    acc = spec.out_dtype
    d_shape, v_shape, c_shape, r_shape = data_vec.shape, val.shape, col.shape, ptr.shape
    d_dtype, v_dtype = data_vec.dtype, val.dtype
    row_name, update_name = CSR_ROW_NAME, CSR_UPDATE_NAME

    @T.prim_func(s_tir=True)
    def kernel(d: T.handle, v: T.handle, c: T.handle, r: T.handle, o: T.handle):
        Dv = T.match_buffer(d, d_shape, d_dtype)
        Val = T.match_buffer(v, v_shape, v_dtype)
        Col = T.match_buffer(c, c_shape, "int32")
        Ptr = T.match_buffer(r, r_shape, "int32")
        Out = T.match_buffer(o, (n_, o_, ht_, wt_, vh_, vw_), acc)
        for n, oc in T.grid(n_, o_):
            with T.sblock(row_name):
                vn, vo = T.axis.remap("SS", [n, oc])
                T.reads(Dv[vn, 0:ht_, 0:wt_, 0:c_, 0:hi_, 0:wi_], Val[0:nnz], Col[0:nnz],
                        Ptr[vo:vo + 2])
                T.writes(Out[vn, vo, 0:ht_, 0:wt_, 0:vh_, 0:vw_])
                for ht, wt, j, vh, vw in T.grid(ht_, wt_, Ptr[vo + 1] - Ptr[vo], vh_, vw_):
                    with T.sblock(update_name):
                        vht = T.axis.spatial(ht_, ht)
                        vwt = T.axis.spatial(wt_, wt)
                        vj = T.axis.reduce(Ptr[vo + 1] - Ptr[vo], j)
                        vvh = T.axis.spatial(vh_, vh)
                        vvw = T.axis.spatial(vw_, vw)
                        with T.init():
                            Out[vn, vo, vht, vwt, vvh, vvw] = T.cast(0, acc)
                        Out[vn, vo, vht, vwt, vvh, vvw] = Out[
                            vn, vo, vht, vwt, vvh, vvw
                        ] + T.cast(Val[Ptr[vo] + vj], acc) * T.cast(
                            Dv[
                                vn,
                                vht,
                                vwt,
                                Col[Ptr[vo] + vj] // khw,
                                vvh * sh + Col[Ptr[vo] + vj] // kw % kh * dh,
                                vvw * sw + Col[Ptr[vo] + vj] % kw * dw,
                            ],
                            acc,
                        )

    return kernel
