"""The convolution algorithms dlas ships (layer 4): three algorithms x two data formats.

Every conv of a model uses the chosen algorithm, as in the paper. Where an algorithm has
no form for a conv (spatial pack and grouped/depthwise convs), the conv is computed by the
fallback named in the description and the compiler records it per conv.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlas.registry import NoParams, register

if TYPE_CHECKING:
    from dlas.algorithms.base import ConvAlgorithm


def needs_sparse_weights(point: Any) -> str | None:
    """CSR formats only pay off on pruned weights; on a dense model they are pure overhead."""
    compression = point.compression
    if "sparse" in compression.tags:
        return None
    return (f"CSR needs a compression that leaves zero weights (tagged 'sparse', e.g. "
            f"weight_pruning); '{compression.name}' leaves none")


@register("algorithms", "direct", tags={"dense"},
          description="direct convolution: sliding window over NCHW, no data reshaping; every "
                      "conv kind. Minimal schedule: batch x out-channels in parallel, output "
                      "width vectorized")
def direct(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.direct import DirectConv

    return DirectConv()


@register("algorithms", "gemm", tags={"dense"},
          description="GEMM: im2col of the input, then (O, Cg*KH*KW) weight x im2col matrix "
                      "per group; every conv kind. Minimal schedule: im2col and product "
                      "parallel, pixel loop vectorized")
def gemm(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.gemm import GemmConv

    return GemmConv()


@register("algorithms", "spatial_pack", tags={"dense"},
          description="spatial pack: input tiled (2x8 pixels, halo included), weights packed "
                      "16 out-channels innermost at compile time, output unpacked to NCHW. "
                      "Grouped/depthwise convs have no packed form: computed with 'direct' "
                      "(recorded per conv)")
def spatial_pack(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.spatial_pack import SpatialPackConv

    return SpatialPackConv()


@register("algorithms", "direct_csr", tags={"csr"}, constraints=[needs_sparse_weights],
          description="direct convolution over a CSR weight (data/indices/indptr built at "
                      "compile time); the loop over a filter's non-zeros is data-dependent, so "
                      "zeros cost nothing; every conv kind")
def direct_csr(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.direct import DirectCSRConv

    return DirectCSRConv()


@register("algorithms", "gemm_csr", tags={"csr"}, constraints=[needs_sparse_weights],
          description="im2col, then CSR weight matrix x im2col matrix (sparse x dense, row by "
                      "row); every conv kind")
def gemm_csr(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.gemm import GemmCSRConv

    return GemmCSRConv()


@register("algorithms", "spatial_pack_csr", tags={"csr"}, constraints=[needs_sparse_weights],
          description="spatial pack of the input with CSR weight rows, output unpacked to "
                      "NCHW. Grouped/depthwise convs: computed with 'direct_csr' (recorded "
                      "per conv)")
def spatial_pack_csr(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.spatial_pack import SpatialPackCSRConv

    return SpatialPackCSRConv()
