"""Minimal schedules of the spatial-pack convolution, dense and CSR (untuned baseline).

1. Packing stages (`data_vec`, and `kernel_vec` when the weight is not a constant):
   leading loops fused in parallel, innermost vectorized. Padding likewise.
2. Dense tile product `conv2d_spatial_pack`, loops (n, ot, ht, wt, vh, vw, vc, c, ky, kx):
   n and the channel-tile loop fused in parallel; the reduction loops moved outside the
   tile (vh, vw, vc) and the channel lane loop vc vectorized — the packing exists so that
   this innermost loop is contiguous in both the packed weight and the output.
3. CSR tile product: (n, o) rows in parallel; inside, per tile (ht, wt), the loop over
   the row's non-zeros comes before the tile's pixels, and the tile row vw is vectorized
   (`schedule_util.schedule_csr_rows`).
4. Unpack to NCHW (the block the compiler tags): (n, o) fused in parallel, x vectorized;
   fused epilogues (bias, ReLU, ...) are computed at that parallel loop.

No unrolling, no cache stages, no tile-size search: left to tuning.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..base import ConvSpec
from ..schedule_util import (
    parallel_outer,
    parallelize_producers,
    schedule_csr_rows,
    vectorize_loop,
    vectorize_under_reduction,
)


def schedule_spatial_pack(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the dense spatial pack whose unpack block is `block`; return its parallel loop."""
    (conv,) = sch.get_producers(block)
    n, ot, _ht, _wt, vh, vw, vc, rc, ry, rx = sch.get_loops(conv)
    parallel_outer(sch, [n, ot])
    vectorize_under_reduction(sch, conv, [rc, ry, rx], [vc], spec.out_dtype)
    _schedule_packing(sch, conv)
    return _schedule_unpack(sch, block, spec)


def schedule_spatial_pack_csr(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the CSR spatial pack whose unpack block is `block`; return its parallel loop."""
    (row,) = sch.get_producers(block)
    schedule_csr_rows(sch, row, spec.out_dtype, vector_loops=1)
    _schedule_packing(sch, row)
    return _schedule_unpack(sch, block, spec)


def _schedule_packing(sch: s_tir.Schedule, conv: SBlockRV) -> None:
    for producer in sch.get_producers(conv):
        parallelize_producers(sch, producer)  # padding, if any
    parallelize_producers(sch, conv)  # data_vec (and kernel_vec)


def _schedule_unpack(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    n, o, _y, x = sch.get_loops(block)
    outer = parallel_outer(sch, [n, o])
    vectorize_loop(sch, x, spec.out_dtype)
    return outer
