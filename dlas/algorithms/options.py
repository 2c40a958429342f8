"""The convolution algorithms dlas ships (layer 4): three algorithms x two weight formats
(dense, CSR), the dense ones in three activation layouts.

Every conv of a model uses the chosen algorithm, as in the paper. Where an algorithm has
no form for a conv (spatial pack and grouped/depthwise convs), the conv is computed by the
fallback named in the description and the compiler records it per conv. The dense
algorithms take `layout` (NCHW, the paper's and the default; NHWC; NCHWc), which the
compiler keeps across the whole model (`dlas.compiler.layout`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from dlas.registry import NoParams, register

if TYPE_CHECKING:
    from dlas.algorithms.base import ConvAlgorithm


def vector_layouts_need_a_cpu(point: Any) -> str | None:
    """NHWC and NCHWc have CPU schedules (SIMD registers) only; a GPU keeps NCHW."""
    layout = getattr(point.algorithms.params, "layout", "NCHW")
    if layout == "NCHW":
        return None
    from dlas.targets.resolve import resolve_target

    spec = resolve_target(point)
    if spec.tvm_target.get("kind") != "llvm":
        return (f"layout {layout} has CPU schedules only; target '{spec.name}' is "
                f"{spec.tvm_target.get('kind')} (use layout: NCHW there)")
    return None


def check_channel_block(block: int) -> None:
    """An NCHWc channel block is a power of two from 1 to 64."""
    if block < 1 or block > 64 or block & (block - 1):
        raise ValueError(f"block must be a power of two from 1 to 64, got {block}")


class LayoutParams(BaseModel):
    """The activation layout a dense algorithm computes in (layer 4's data format)."""

    model_config = ConfigDict(extra="forbid")

    layout: Literal["NCHW", "NHWC", "NCHWc"] = Field(
        "NCHW", description="activation layout kept across the model: NCHW (the paper's), "
                            "NHWC, or NCHWc (channels in blocks of one SIMD register)")
    block: int | None = Field(
        None, description="NCHWc only: channels per block (default: the target's SIMD "
                          "width in float32 lanes: 16 AVX-512, 8 AVX2, 4 Neon)")

    @model_validator(mode="after")
    def _block_is_nchwc(self) -> LayoutParams:
        if self.block is not None:
            if self.layout != "NCHWc":
                raise ValueError(f"block is NCHWc's channel block; layout {self.layout} "
                                 "has none (drop block, or set layout: NCHWc)")
            check_channel_block(self.block)
        return self

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a point that leaves the layout at NCHW is the point it was before layouts
        # existed: same stored results, same cache keys
        return {k: v for k, v in handler(self).items()
                if v != type(self).model_fields[k].default}


def needs_sparse_weights(point: Any) -> str | None:
    """CSR formats only pay off on pruned weights; on a dense model they are pure overhead."""
    compression = point.compression
    if "sparse" in compression.tags:
        return None
    return (f"CSR needs a compression that leaves zero weights (tagged 'sparse', e.g. "
            f"weight_pruning); '{compression.name}' leaves none")


@register("algorithms", "direct", tags={"dense"}, params=LayoutParams,
          constraints=[vector_layouts_need_a_cpu],
          description="direct convolution: sliding window over the input, no data "
                      "reshaping; every conv kind. NCHW schedule: batch x out-channels in "
                      "parallel, output width vectorized. NHWC/NCHWc: register tiles of "
                      "channel vectors x columns (the micro-kernel), epilogue fused")
def direct(params: LayoutParams) -> ConvAlgorithm:
    from dlas.algorithms.direct import DirectConv

    return DirectConv(layout=params.layout, block=params.block)


@register("algorithms", "gemm", tags={"dense"}, params=LayoutParams,
          constraints=[vector_layouts_need_a_cpu],
          description="GEMM: im2col of the input, then (O, Cg*KH*KW) weight x im2col matrix "
                      "per group; every conv kind. NCHW schedule: im2col and product "
                      "parallel, pixel loop vectorized. NHWC/NCHWc: im2col rows contiguous "
                      "in K, product register-tiled against the packed weight")
def gemm(params: LayoutParams) -> ConvAlgorithm:
    from dlas.algorithms.gemm import GemmConv

    return GemmConv(layout=params.layout, block=params.block)


@register("algorithms", "spatial_pack", tags={"dense"}, params=LayoutParams,
          constraints=[vector_layouts_need_a_cpu],
          description="spatial pack: input tiled (NCHW 2x8 pixels, halo included), weights "
                      "packed output channels innermost at compile time, output unpacked to "
                      "the layout; NHWC/NCHWc tiles (2 rows x columns x channel vectors) "
                      "held in registers. Grouped/depthwise convs have no packed form: "
                      "computed with 'direct' (recorded per conv)")
def spatial_pack(params: LayoutParams) -> ConvAlgorithm:
    from dlas.algorithms.spatial_pack import SpatialPackConv

    return SpatialPackConv(layout=params.layout, block=params.block)


@register("algorithms", "direct_csr", tags={"csr"}, params=LayoutParams,
          constraints=[needs_sparse_weights, vector_layouts_need_a_cpu],
          description="direct convolution over a CSR weight (built at compile time); zeros "
                      "cost nothing. NCHW: the pixel-tile sparse kernel (XNNPACK's SpMM "
                      "design: a register tile of pixels per output channel, each non-zero "
                      "broadcast into it) over the padded input in place; strided convs "
                      "computed with 'spatial_pack_csr' (recorded per conv). NHWC/NCHWc: "
                      "block-CSR rows of one output-channel vector (a column is skipped when "
                      "the whole vector is pruned), each stored vector feeding a register "
                      "tile of columns")
def direct_csr(params: LayoutParams) -> ConvAlgorithm:
    from dlas.algorithms.direct import DirectCSRConv

    return DirectCSRConv(layout=params.layout, block=params.block)


@register("algorithms", "gemm_csr", tags={"csr"}, constraints=[needs_sparse_weights],
          description="im2col, then CSR weight matrix x im2col matrix by the pixel-tile "
                      "sparse kernel (sparse x dense, XNNPACK's SpMM); every conv kind")
def gemm_csr(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.gemm import GemmCSRConv

    return GemmCSRConv()


@register("algorithms", "spatial_pack_csr", tags={"csr"}, constraints=[needs_sparse_weights],
          description="the input packed into one plane per (row phase, kernel column), so "
                      "every kernel tap is one offset, times the CSR weight rows by the "
                      "pixel-tile sparse kernel; every conv kind")
def spatial_pack_csr(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.spatial_pack import SpatialPackCSRConv

    return SpatialPackCSRConv()


class MixedParams(BaseModel):
    """Where a conv switches from the sparse kernel to the dense one."""

    model_config = ConfigDict(extra="forbid")

    layout: Literal["NCHWc"] = Field(
        "NCHWc", description="the model's layout: the dense convs' (the sparse ones are "
                             "reordered to NCHW around them)")
    dense_above: float | None = Field(
        None, ge=0, le=1,
        description="weight density (non-zeros / weights) from which a conv takes the "
                    "dense NCHWc micro-kernel; below it, the NCHW pixel-tile sparse kernel "
                    "(0: every conv dense, 1: every conv with a zero weight sparse; "
                    "default: where the two met for the width of the target's FMA units, "
                    "0.35 with 512 bits (Intel AVX-512) and 0.55 with 256 (AVX2, and AMD "
                    "Zen 4, which runs AVX-512 on 256-bit units); 0.85 with 256 for 1x1 "
                    "and depthwise convs)")
    block: int | None = Field(
        None, description="NCHWc channels per block of the dense convs (default: the "
                          "target's SIMD width in float32 lanes)")

    @model_validator(mode="after")
    def _block_is_a_power_of_two(self) -> MixedParams:
        if self.block is not None:
            check_channel_block(self.block)
        return self


@register("algorithms", "mixed_csr", tags={"csr"}, params=MixedParams,
          constraints=[needs_sparse_weights, vector_layouts_need_a_cpu],
          description="sparse where it pays, dense elsewhere: per conv, by its weight's "
                      "density, the dense direct NCHWc micro-kernel or the NCHW pixel-tile "
                      "sparse kernel (spatial_pack_csr's); the model kept in NCHWc, the "
                      "sparse convs reordered around (each conv's choice in the row's "
                      "layout report)")
def mixed_csr(params: MixedParams) -> ConvAlgorithm:
    from dlas.algorithms.mixed_csr import MixedCSRConv

    return MixedCSRConv(dense_above=params.dense_above, block=params.block)
