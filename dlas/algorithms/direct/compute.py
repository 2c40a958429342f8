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

from ..base import ConvSpec

#: Name of the padding stage; the schedule looks it up among the conv's producers.
PAD_NAME = "data_pad"
#: Name of the conv output stage.
CONV_NAME = "conv2d_nchw_direct"


def pad_nchw(data: te.Tensor, padding: tuple[int, int, int, int]) -> te.Tensor:
    """Zero-pad H and W (top, left, bottom, right); a no-op when there is no padding."""
    pt, pl, pb, pr = padding
    if not any(padding):
        return data
    n, c, h, w = (int(v) for v in data.shape)
    zero = tirx.const(0, data.dtype)

    def fpad(ni, ci, yi, xi):
        inside = tirx.all(yi >= pt, yi < pt + h, xi >= pl, xi < pl + w)
        return tirx.if_then_else(inside, data[ni, ci, yi - pt, xi - pl], zero)

    return te.compute((n, c, h + pt + pb, w + pl + pr), fpad, name=PAD_NAME)


def conv2d_nchw_direct(data: te.Tensor, weight: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The direct conv of `spec` on TE tensors `data` (NCHW) and `weight` (OIHW)."""
    _, cg, kh, kw = spec.weight_shape
    sh, sw = spec.strides
    dh, dw = spec.dilation
    out_channels_per_group = spec.out_channels // spec.groups
    padded = pad_nchw(data, spec.padding)
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out_dtype = spec.out_dtype

    def channel(o):
        # Keep the common groups == 1 index free of a division the simplifier must remove.
        if spec.groups == 1:
            return rc
        return (o // out_channels_per_group) * cg + rc

    def fconv(n, o, y, x):
        pixel = padded[n, channel(o), y * sh + ry * dh, x * sw + rx * dw]
        return te.sum(
            pixel.astype(out_dtype) * weight[o, rc, ry, rx].astype(out_dtype),
            axis=[rc, ry, rx],
        )

    return te.compute(spec.out_shape, fconv, name=CONV_NAME)
