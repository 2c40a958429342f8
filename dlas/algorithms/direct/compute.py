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

from tvm import te, tirx

from ..base import ConvSpec
from ..blocked import blocking_of, pad_stored, read_input, stored_output
from ..common import extern_stage, in_channel, pad_nchw, split_column, widen
from ..csr_kernel import CSRRowLayout, csr_row_kernel

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
