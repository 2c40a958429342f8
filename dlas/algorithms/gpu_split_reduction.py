"""A dense conv's GPU schedule for batch 1: a warp's lanes split each output's reduction.

The H200 check of 2026-11-30 (docs/gpu.md) found the tiled implicit GEMM
(`gpu_implicit_gemm`, dlight's `Matmul`) leaving the GPU nearly empty at batch 1: its block
tile is 32 pixels x 64 channels, and these convs have 4-256 output pixels, so each launched
2-8 blocks on 132 SMs, each walking the reduction serially (144 steps of 16 for a 3x3 conv
over 256 channels). What fills a GPU at batch 1 is parallelism over the reduction as well
as over the outputs, as cuDNN's and cuBLAS's split-K kernels do for such shapes.

Here a few outputs share a thread block, one row of threads each (`threadIdx.y`), and the
lanes of a row (`threadIdx.x`) split that output's reduction (input channels x taps),
lane `l` taking every `lanes`-th term so neighbouring lanes read neighbouring weights
(coalesced); the lanes' partial sums meet in TVM's cross-thread reduction (warp shuffles),
and the epilogue (bias, residual, ReLU) runs on the sum. The last stage's 3x3 convs of
ResNet18-w0.5 at 16x16 (1024 outputs, K = 2304) become 256 blocks of 4 x 32 threads, 72
terms a lane, where the tiled GEMM had 4 blocks.

A reduction too short to split (the first conv's 27 terms, a depthwise conv's 9) keeps the
thread binding: one thread an output, which already fills the GPU with outputs. The
padding and packing stages (spatial pack's, GEMM's im2col) are inlined into the reads, as
dlight's rules do. Integer convs keep the binding, as they do in the tiled family
(`gpu_implicit_gemm.UNCHECKED_DTYPES`).

It is `cuda(schedules=reduction)`: built and checked by nvcc on the CPU machines, and not
yet timed on a GPU, so the default untuned schedule stays the tiled one until a lent GPU
compares them (`scripts/gpu_check.sh` adds the row).
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from .gpu_implicit_gemm import reads_integers

#: Threads per block the schedule aims for (rows of outputs x lanes).
THREADS = 128
#: The most lanes one output's reduction is split over: one warp, so the partial sums meet
#: in shuffles without shared memory.
MAX_LANES = 32
#: The fewest terms a lane should sum; a reduction shorter than 4 lanes of this keeps the
#: thread binding.
MIN_TERMS_PER_LANE = 8
MIN_LANES = 4


def lanes_for(reduction: int) -> int:
    """Lanes to split a reduction of `reduction` terms over (a power of two), or 0 where
    it is too short to split."""
    lanes = 1
    while lanes * 2 <= MAX_LANES and lanes * 2 * MIN_TERMS_PER_LANE <= reduction:
        lanes *= 2
    return lanes if lanes >= MIN_LANES else 0


def split_reduction_schedule(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """`func` (one conv and its epilogue) with each output's reduction split over a warp's
    lanes, or None where the conv's reduction is too short or the function has another
    shape (the thread binding then stands)."""
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base import try_inline_contiguous_spatial

    if reads_integers(func):
        return None
    sch = s_tir.Schedule(func)
    infos = try_inline_contiguous_spatial(sch, normalize_prim_func(sch))
    if not infos:
        return None
    # the conv first (its padding and packing inlined into it), at most one epilogue after:
    # a block left before it would have no threads
    if len(infos) > 2 or "R" not in infos[0].dom_kind() or any(
            "R" in info.dom_kind() for info in infos[1:]):
        return None
    conv = infos[0]
    kind = conv.dom_kind()
    spatial = len(kind) - len(kind.lstrip("S"))
    if spatial == 0 or kind != "S" * spatial + "R" * (len(kind) - spatial):
        return None
    extents = [info.dom for info in conv.iters]
    if not all(isinstance(e, (int, tirx.IntImm)) for e in extents):
        return None
    reduction = 1
    for extent in extents[spatial:]:
        reduction *= int(extent)
    lanes = lanes_for(reduction)
    if lanes == 0:
        return None
    rows = THREADS // lanes
    epilogue = infos[1] if len(infos) == 2 else None

    # the outputs: one row of lanes each, `rows` to a block
    outer = epilogue.block_rv if epilogue is not None else conv.block_rv
    loops = sch.get_loops(outer)
    outputs = sch.fuse(*(loops if epilogue is not None else loops[:spatial]))
    bx, ty = sch.split(outputs, [None, rows])
    sch.bind(bx, "blockIdx.x")
    sch.bind(ty, "threadIdx.y")
    if epilogue is not None:
        sch.compute_at(conv.block_rv, ty, preserve_unit_loops=True)
        sch.set_scope(conv.block_rv, 0, "local")
    # the reduction: lane `l` sums terms l, l + lanes, ... (coalesced weight reads)
    terms = sch.fuse(*sch.get_loops(conv.block_rv)[-(len(kind) - spatial):])
    steps, lane = sch.split(terms, [None, lanes])
    sch.reorder(lane, steps)
    sch.bind(lane, "threadIdx.x")
    sch.annotate(steps, ann_key="pragma_auto_unroll_max_step", ann_val=16)
    sch.annotate(steps, ann_key="pragma_unroll_explicit", ann_val=1)
    return sch
