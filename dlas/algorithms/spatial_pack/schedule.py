"""Minimal schedules of the spatial-pack convolution, dense and CSR (untuned baseline).

1. Packing stages (`data_vec`, and `kernel_vec` when the weight is not a constant):
   leading loops fused in parallel, innermost vectorized. Padding likewise.
2. Dense tile product `conv2d_spatial_pack`, loops (n, ot, ht, wt, vh, vw, vc, c, ky, kx):
   n and the channel-tile loop fused in parallel; the reduction loops moved outside the
   tile (vh, vw, vc) and the channel lane loop vc vectorized — the packing exists so that
   this innermost loop is contiguous in both the packed weight and the output.
3. CSR: the pixel-tile sparse kernel (`spmm_kernel`) brings its own loop nest; its tasks
   run in parallel; the packed planes and their padding: (n, c) in parallel, rows
   vectorized.
4. Unpack to NCHW (the block the compiler tags): (n, o) fused in parallel, x vectorized;
   fused epilogues (bias, ReLU, ...) are computed at that parallel loop.

No unrolling, no cache stages, no tile-size search: left to tuning.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ...tir.conv_spec import REGISTER_TILE_ATTR
from ...tir.schedule_helpers import TENSORIZE_ATTR
from ..base import ConvSpec
from ..microkernel import output_loops, tile_split, unroll_tile, vectorize_lane
from ..schedule_util import (
    parallel_outer,
    parallelize_producers,
    parallelize_rows,
    schedule_csr_rows,
    vectorize_loop,
    vectorize_under_reduction,
)
from ..spmm_schedule import schedule_spmm
from .compute import vector_tiles_for


def schedule_spatial_pack(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the dense spatial pack whose unpack block is `block`; return its parallel loop."""
    (conv,) = sch.get_producers(block)
    n, ot, _ht, _wt, vh, vw, vc, rc, ry, rx = sch.get_loops(conv)
    parallel_outer(sch, [n, ot])
    vectorize_under_reduction(sch, conv, [rc, ry, rx], [vc], spec.out_dtype)
    _schedule_packing(sch, conv)
    return _schedule_unpack(sch, block, spec)


def schedule_spatial_pack_csr(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the CSR spatial pack whose kernel block is `block`; return its task loop
    (`spmm_schedule.schedule_spmm` says who packs the planes)."""
    return schedule_spmm(sch, block, spec)


def schedule_spatial_pack_csr_rows(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec
                                   ) -> LoopRV:
    """The GPU rows form's CPU schedule (a GPU binds it with `dlas.compiler.gpu_schedule`
    instead), `block` its unpack stage: rows in parallel, per tile the non-zero loop
    before the tile's pixels; packing and unpacking parallel."""
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


def schedule_spatial_pack_vector(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec,
                                 dot: str | None = None) -> LoopRV:
    """Schedule the vector-layout spatial pack whose output block is `block`.

    The output's loops are cut into tiles, (batch, channel tiles, tile rows) in
    parallel; each tile's product is computed at its tile loop into registers (the
    micro-kernel's loop order: reduction outside, channel vectors x vh x vw unrolled,
    lanes vectorized) and written out from there, where the compiler computes the
    epilogue too. The packing (padding inlined into it) runs in parallel over tile rows.
    `dot` names the int8 dot-product intrinsic of `conv2d_vector_spatial_pack_dot`'s
    form: its 4 input channels go inside the lanes (the lane loop is tensorized at the
    end of scheduling, `TENSORIZE_ATTR`) and their groups are unrolled.
    Returns the tile loop.
    """
    t = vector_tiles_for(spec)
    (tiles,) = sch.get_producers(block)
    (data_vec,) = sch.get_producers(tiles)
    for pad in sch.get_producers(data_vec):
        sch.compute_inline(pad)
    packed = "uint8" if dot is not None else spec.data_dtype
    parallelize_rows(sch, data_vec, 2, packed)  # (n, tile row)
    loops = output_loops(sch, block, spec)
    oc_outer, oc_inner = tile_split(sch, loops.oc, t.oc_inner, 2 * t.oc_inner)
    y_outer, y_inner = sch.split(loops.y, factors=[None, t.vh])
    x_outer, x_inner = sch.split(loops.x, factors=[None, t.vw])
    sch.reorder(loops.n, oc_outer, y_outer, x_outer, oc_inner, y_inner, x_inner, loops.lane)
    sch.parallel(sch.fuse(loops.n, oc_outer, y_outer))
    sch.compute_at(tiles, x_outer, preserve_unit_loops=True)
    tile_loops = sch.get_loops(tiles)
    dotted = tile_loops[-1:] if dot is not None else []  # the intrinsic's 4 inputs
    # ri: the input channels of a chunk, or (dot) their groups of 4
    *_, n, oc, ht, wt, vh, vw, lane, rc, ry, rx, ri = tile_loops[:len(tile_loops) - len(dotted)]
    sch.reorder(rc, ry, rx, ri, n, oc, ht, wt, vh, vw, lane, *dotted)
    for loop in (oc, vh, vw, *([ri] if dot is not None else [])):
        sch.unroll(loop)
    if dot is None:
        vectorize_lane(sch, lane)
    unroll_tile(sch, sch.decompose_reduction(tiles, rc), x_outer)
    if dot is not None:  # after the split: the init's copy of the lane loop stays plain
        sch.annotate(lane, TENSORIZE_ATTR, dot)
    sch.set_scope(tiles, 0, "local")
    unroll_tile(sch, block, x_outer)
    sch.annotate(block, REGISTER_TILE_ATTR, 1)
    return x_outer
