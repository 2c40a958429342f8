"""Minimal schedules of the GEMM convolution, dense and CSR (untuned; the paper's baseline).

1. im2col stage: its leading loops (n, g, k, y) fused and run in parallel, the innermost
   (the output-width pixel loop x) vectorized. Padding, when
   not inlined, gets the same treatment.
2. Dense product `conv2d_nchw_gemm`, loops (n, o, y, x, k): n and o fused in parallel;
   the reduction k moved outside x, x vectorized, zero-initialisation split off. This is
   the same loop treatment as the direct conv's, so the two differ only by the im2col
   matrix being materialised.
3. CSR product: the pixel-tile sparse kernel (`spmm_kernel`) brings its own loop nest;
   its tasks run in parallel; its im2col's (n, c) loops in parallel, rows vectorized.

No blocking of the matrices, no packing, no unrolling: all left to tuning.
"""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..base import ConvSpec
from ..blocked import blocking_of
from ..microkernel import schedule_register_tile, tile_for
from ..schedule_util import (
    parallel_outer,
    parallelize_producers,
    parallelize_rows,
    schedule_csr_rows,
    vectorize_under_reduction,
)
from ..spmm_schedule import schedule_spmm


def schedule_gemm(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the dense GEMM conv whose product block is `block`; return its parallel loop."""
    n, o, y, x, k = sch.get_loops(block)
    outer = parallel_outer(sch, [n, o])
    vectorize_under_reduction(sch, block, [k], [x], spec.out_dtype)
    _schedule_im2col(sch, block)
    return outer


def schedule_gemm_csr(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule the CSR GEMM conv whose kernel block is `block`; return its task loop
    (`spmm_schedule.schedule_spmm` says who builds the im2col)."""
    return schedule_spmm(sch, block, spec)


def schedule_gemm_csr_rows(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """The GPU rows form's CPU schedule (a GPU binds it with `dlas.compiler.gpu_schedule`
    instead): rows in parallel, the non-zero loop outermost, x vectorized; im2col as the
    dense form's."""
    outer = schedule_csr_rows(sch, block, spec.out_dtype, vector_loops=1)
    _schedule_im2col(sch, block)
    return outer


def _schedule_im2col(sch: s_tir.Schedule, block: SBlockRV) -> None:
    for producer in sch.get_producers(block):
        parallelize_producers(sch, producer)  # padding, if any
    parallelize_producers(sch, block)  # im2col


def schedule_gemm_vector(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec,
                         dot: str | None = None) -> LoopRV:
    """Schedule the vector-layout GEMM: the product as the register-tiled micro-kernel
    over one K loop (the matrix's row, contiguous in the im2col matrix and the packed
    weight; a depthwise conv's 3x3 K unrolled), and im2col with the padding inlined into
    it, its rows in parallel and its channel runs vectorized. `dot` names the int8
    dot-product intrinsic of `conv2d_vector_gemm_dot`'s form: K's groups of 4 are then
    the one K loop and the 4 inside them the intrinsic's. Returns the tile loop."""
    depthwise = blocking_of(spec).depthwise
    (im2col,) = sch.get_producers(block)
    for pad in sch.get_producers(im2col):
        sch.compute_inline(pad)
    copied = "uint8" if dot is not None else spec.data_dtype
    parallelize_rows(sch, im2col, 3 if depthwise else 2, copied)  # (n, [c,] y)
    return schedule_register_tile(sch, block, spec, tile_for(spec), fuse_reduction=True,
                                  unroll=(0,) if depthwise else (), dot=dot)
