"""Minimal schedules of the direct convolution, dense and CSR (untuned; the paper's baseline).

Dense (`schedule_direct`), and nothing more:

1. Output block `conv2d_nchw_direct`, loops (n, o, y, x, rc, ry, rx): fuse n and o into
   one loop and run it in parallel across the runtime's threads, so each thread computes
   whole output-channel planes.
2. With `vectorize` (the default; `DirectConv(vectorize=False)` turns it off): move the
   output-width loop x inside the reduction loops, split the zero-initialisation off the
   reduction (`decompose_reduction`) and vectorize x in both. x is a spatial loop, so this
   is always legal; it is the innermost loop of the plain (n, o, y, x) output nest, moved
   one step. Without it the conv is parallel only and LLVM sees a 7-deep scalar nest.
3. Padding stage `data_pad` (if any): fuse its leading loops in parallel and vectorize its
   innermost loop.

CSR (`schedule_direct_csr`): the pixel-tile sparse kernel (`spmm_kernel`) brings its own
loop nest (tiles, chunks, rows, vectors); its tasks run in parallel, the output stage is
computed per task; padding as above, its (n, c) loops in parallel.

No tiling, no unrolling, no cache stages, no layout change: everything else is left to
tuning. Loops over the batch stay part of the parallel loop, so batch > 1 also scales.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..base import ConvSpec
from ..blocked import blocking_of
from ..microkernel import schedule_register_tile, tile_for, unroll_tile, vectorize_lane
from ..schedule_util import (
    csr_update_loops,
    parallel_outer,
    parallelize_padding,
    parallelize_producers,
    schedule_csr_rows,
    vectorize_under_reduction,
)
from ..spmm_schedule import schedule_spmm


def schedule_direct(
    sch: s_tir.Schedule,
    block: SBlockRV,
    spec: ConvSpec,
    *,
    vectorize: bool = True,
) -> LoopRV:
    """Schedule the direct conv whose output block is `block`; return the parallel loop."""
    n, o, y, x, rc, ry, rx = sch.get_loops(block)
    outer = parallel_outer(sch, [n, o])
    if vectorize:
        vectorize_under_reduction(sch, block, [rc, ry, rx], [x], spec.out_dtype)
    parallelize_producers(sch, block)
    return outer


def schedule_direct_csr(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the direct CSR conv whose kernel block is `block`; return the task loop
    (`spmm_schedule.schedule_spmm` says who pads the input)."""
    return schedule_spmm(sch, block, spec)


def schedule_csr_rows_form(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """The GPU rows form's CPU schedule (a GPU binds it with `dlas.compiler.gpu_schedule`
    instead; this one serves the same compute on a CPU): rows in parallel, the non-zero
    loop outermost inside a row, x vectorized."""
    outer = schedule_csr_rows(sch, block, spec.out_dtype, vector_loops=1)
    parallelize_producers(sch, block)
    return outer


def schedule_direct_vector(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec,
                           dot: str | None = None) -> LoopRV:
    """Schedule the direct conv in a vector layout as the register-tiled micro-kernel
    (`microkernel`), the kernel taps of a depthwise conv unrolled (its tap loop is the
    whole reduction); padding parallel. `dot` names the int8 dot-product intrinsic of
    `conv2d_vector_direct_dot`'s form: its 4 input channels are the innermost loop, its
    groups of 4 unrolled. Returns the tile loop the epilogue is computed at."""
    depthwise = blocking_of(spec).depthwise
    padded = "uint8" if dot is not None else spec.data_dtype
    parallelize_padding(sch, block, spec.data_layout_.spatial_axes[1], padded)
    unroll = (0, 1) if depthwise else (3,) if dot is not None else ()
    return schedule_register_tile(sch, block, spec, tile_for(spec), unroll=unroll, dot=dot)


def schedule_direct_vector_csr(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec
                               ) -> LoopRV:
    """Schedule the vector-layout direct CSR conv whose output stage is `block`.

    Rows (batch, output-channel vector) run in parallel; in a row, per output row and
    tile of columns, the loop over the row's stored weight vectors is outside the tile's
    columns (unrolled) and lanes (vectorized), so each stored vector feeds a column's
    worth of FMAs and the tile stays in registers across the loop. The output stage (and
    after it the epilogue) runs at the row loop."""
    (row,) = sch.get_producers(block)
    outer = parallel_outer(sch, sch.get_loops(row))
    update, loops, j = csr_update_loops(sch, row)
    writeback = sch.cache_write(update, 0, "local")  # the tile's accumulators
    loops = sch.get_loops(update)
    cols, lane = loops[j + 1:]
    vectorize_lane(sch, lane)
    sch.unroll(cols)
    init = sch.decompose_reduction(update, loops[j])
    vectorize_lane(sch, sch.get_loops(init)[-1])
    sch.reverse_compute_at(writeback, loops[j - 1], preserve_unit_loops=True)
    unroll_tile(sch, writeback, loops[j - 1])
    parallelize_padding(sch, row, spec.data_layout_.spatial_axes[1], spec.data_dtype)
    sch.reverse_compute_at(block, outer, preserve_unit_loops=True)
    vectorize_lane(sch, sch.get_loops(block)[-1])
    return outer
