"""TE building blocks shared by the convolution algorithms (padding, kernel indexing)."""

from __future__ import annotations

from tvm import te, tirx

from .base import ConvSpec

#: Name of the padding stage; schedules look it up among the conv's producers.
PAD_NAME = "data_pad"


def pad_nchw(data: te.Tensor, padding: tuple[int, int, int, int],
             extra: tuple[int, int] = (0, 0)) -> te.Tensor:
    """Zero-pad H and W (top, left, bottom, right); a no-op when there is no padding.

    `extra` adds rows/columns at the bottom/right beyond `padding`: tiled algorithms
    compute whole tiles and read past the last output pixel's window.
    """
    pt, pl, pb, pr = padding
    pb, pr = pb + extra[0], pr + extra[1]
    if not any((pt, pl, pb, pr)):
        return data
    n, c, h, w = (int(v) for v in data.shape)
    zero = tirx.const(0, data.dtype)

    def fpad(ni, ci, yi, xi):
        inside = tirx.all(yi >= pt, yi < pt + h, xi >= pl, xi < pl + w)
        return tirx.if_then_else(inside, data[ni, ci, yi - pt, xi - pl], zero)

    return te.compute((n, c, h + pt + pb, w + pl + pr), fpad, name=PAD_NAME)


def pad_rows(data: te.Tensor, spec: ConvSpec, rows: int) -> te.Tensor:
    """`spec`'s padding of `data`, with zero rows added at the bottom until the padded
    input has at least `rows` rows (layouts whose last tile reads past the image)."""
    _, _, h, _ = spec.data_shape
    pt, _, pb, _ = spec.padding
    return pad_nchw(data, spec.padding, (max(0, rows - (h + pt + pb)), 0))


def in_channel(spec: ConvSpec, o: tirx.PrimExpr, c: tirx.PrimExpr) -> tirx.PrimExpr:
    """Input channel of (output channel o, in-group channel c): groups map o to a slice."""
    if spec.groups == 1:
        return c  # keep the common case free of a division the simplifier must remove
    cg = spec.weight_shape[1]
    return (o // (spec.out_channels // spec.groups)) * cg + c


def split_column(spec: ConvSpec, k: tirx.PrimExpr) -> tuple[tirx.PrimExpr, ...]:
    """(c, ky, kx) of column k of the weight reshaped to (O, Cg*KH*KW), row-major OIHW."""
    kh, kw = spec.kernel_size
    return k // (kh * kw), (k // kw) % kh, k % kw


def reduction_size(spec: ConvSpec) -> int:
    """Columns of the reshaped weight: Cg * KH * KW."""
    _, cg, kh, kw = spec.weight_shape
    return cg * kh * kw


def widen(value: te.Tensor | tirx.PrimExpr, dtype: str) -> tirx.PrimExpr:
    """Cast to the accumulation dtype (a no-op when equal, so fp32 IR stays clean)."""
    return value if value.dtype == dtype else value.astype(dtype)


def extern_stage(inputs: list[te.Tensor], kernel: tirx.PrimFunc) -> te.Tensor:
    """A TE stage computed by a TIR kernel (used by the CSR algorithms).

    The compiler strips te.extern's wrapper blocks afterwards
    (`dlas.algorithms.base.flatten_extern_blocks`), so the kernel's blocks schedule like
    any other stage's.
    """
    return te.extern_primfunc(inputs, kernel)
