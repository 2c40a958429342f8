"""Minimal schedule of the direct convolution (untuned; the paper's baseline).

What it does, and nothing more:

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

No tiling, no unrolling, no cache stages, no layout change: everything else is left to
tuning. Loops over the batch stay part of the parallel loop, so batch > 1 also scales.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.target import Target
from tvm.target.codegen import llvm_get_vector_width

from ...compiler.minimal_schedule import block_name, is_parallelized, parallelize_block
from ..base import ConvSpec
from .compute import PAD_NAME

#: Vector width assumed when no LLVM target is current (AVX2).
DEFAULT_VECTOR_BITS = 256


def target_vector_bits() -> int:
    """SIMD width of the current LLVM target (the compiler schedules inside `with target`)."""
    target = Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return DEFAULT_VECTOR_BITS
    bits = llvm_get_vector_width(target)
    return bits if bits > 0 else DEFAULT_VECTOR_BITS


def schedule_direct(
    sch: s_tir.Schedule,
    block: SBlockRV,
    spec: ConvSpec,
    *,
    vectorize: bool = True,
) -> LoopRV:
    """Schedule the direct conv whose output block is `block`; return the parallel loop."""
    n, o, y, x, rc, ry, rx = sch.get_loops(block)
    outer = sch.fuse(n, o)
    sch.parallel(outer)
    if vectorize and spec.out_shape[3] > 1:
        sch.reorder(rc, ry, rx, x)
        sch.vectorize(x)
        init = sch.decompose_reduction(block, rc)
        init_x = sch.get_loops(init)[-1]
        if sch.get(init_x).kind != tirx.ForKind.VECTORIZED:
            sch.vectorize(init_x)
    bits = target_vector_bits()
    for producer in sch.get_producers(block):
        if block_name(sch, producer).startswith(PAD_NAME) and not is_parallelized(sch, producer):
            parallelize_block(sch, producer, bits)
    return outer
