"""TE compute of the direct convolution: a sliding window over NCHW, no data reshaping.

    out[n, o, y, x] = sum_{c, ky, kx} pad(data)[n, g(o) * Cg + c, y*sh + ky*dh, x*sw + kx*dw]
                                      * weight[o, c, ky, kx]

with g(o) = o // (O / groups) the group of output channel o and Cg = C / groups the input
channels per group (1 for depthwise). Products are accumulated in `out_dtype` (float32,
float16, or int32 for uint8/int8 inputs). Bias is not part of relax's conv2d (it is a
separate add that the compiler fuses as an epilogue), so it is not here either.
"""

from __future__ import annotations

from tvm import te, tirx
from tvm.script import tirx as T

from ..base import ConvSpec
from ..common import extern_stage, in_channel, pad_nchw, widen

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
    extent comes from `ptr`, so TE cannot express a good loop order; the kernel is TIR
    (`direct_csr_kernel`) entered through `te.extern`, after the TE padding stage.
    """
    padded = pad_nchw(data, spec.padding)
    return extern_stage([padded, val, col, ptr], direct_csr_kernel(spec, padded, val, col, ptr))


def direct_csr_kernel(spec: ConvSpec, padded: te.Tensor, val: te.Tensor, col: te.Tensor,
                      ptr: te.Tensor) -> tirx.PrimFunc:
    """TIR of the direct CSR conv: a block per (n, o) row holding the update over (j, y, x).

    Input buffers take the TE tensors' own shape objects (te.extern requires it).
    """
    n_, o_, oh_, ow_ = spec.out_shape
    _, cg, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    opg = spec.out_channels // spec.groups
    khw = kh * kw
    acc = spec.out_dtype
    c_, hp, wp = (int(v) for v in padded.shape[1:])
    nnz = int(val.shape[0])
    p_shape, v_shape, c_shape, r_shape = padded.shape, val.shape, col.shape, ptr.shape
    p_dtype, v_dtype = padded.dtype, val.dtype
    row_name, update_name = CSR_ROW_NAME, CSR_UPDATE_NAME

    @T.prim_func(s_tir=True)
    def kernel(p: T.handle, v: T.handle, c: T.handle, r: T.handle, o: T.handle):
        Data = T.match_buffer(p, p_shape, p_dtype)
        Val = T.match_buffer(v, v_shape, v_dtype)
        Col = T.match_buffer(c, c_shape, "int32")
        Ptr = T.match_buffer(r, r_shape, "int32")
        Out = T.match_buffer(o, (n_, o_, oh_, ow_), acc)
        for n, oc in T.grid(n_, o_):
            with T.sblock(row_name):
                vn, vo = T.axis.remap("SS", [n, oc])
                T.reads(Data[vn, 0:c_, 0:hp, 0:wp], Val[0:nnz], Col[0:nnz], Ptr[vo:vo + 2])
                T.writes(Out[vn, vo, 0:oh_, 0:ow_])
                for j, y, x in T.grid(Ptr[vo + 1] - Ptr[vo], oh_, ow_):
                    with T.sblock(update_name):
                        vj = T.axis.reduce(Ptr[vo + 1] - Ptr[vo], j)
                        vy = T.axis.spatial(oh_, y)
                        vx = T.axis.spatial(ow_, x)
                        with T.init():
                            Out[vn, vo, vy, vx] = T.cast(0, acc)
                        Out[vn, vo, vy, vx] = Out[vn, vo, vy, vx] + T.cast(
                            Val[Ptr[vo] + vj], acc
                        ) * T.cast(
                            Data[
                                vn,
                                vo // opg * cg + Col[Ptr[vo] + vj] // khw,
                                vy * sh + Col[Ptr[vo] + vj] // kw % kh * dh,
                                vx * sw + Col[Ptr[vo] + vj] % kw * dw,
                            ],
                            acc,
                        )

    return kernel
