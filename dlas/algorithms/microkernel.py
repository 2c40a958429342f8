"""The register-tiled micro-kernel of the vector layouts (NHWC, NCHWc) and its tile choice.

What a performance engineer writes for a convolution on a SIMD CPU (ONNX Runtime's MLAS
NCHWc kernels, TVM's old x86 `conv2d_NCHWc`, NeoCPU): a tile of `oc_inner` output-channel
vectors x `cols` output columns lives in vector registers while the whole reduction runs;
each step loads `oc_inner` weight vectors and broadcasts `cols` input values, so every
load feeds several FMAs. The tile is written once, after the fused epilogue (bias, ReLU,
residual add) has been applied to it in registers. Threads split the (batch, channel
tile, output row) space.

Loop nest of `schedule_register_tile` for an output block with loops (n, oc, y, x, lane)
and reduction r:

    parallel (n, oc_outer, y):
      for x_outer:                           <- returned; the epilogue is computed here
        acc[oc_inner, cols, lane] = 0
        for r ...:                           (taps unrolled where the algorithm says)
          unroll oc_inner: unroll cols: vector lane: acc += in * w
        epilogue(acc) -> out

The accumulator is the block's own output buffer, made "local" by the compiler once the
epilogue sits at the tile loop (`REGISTER_TILE_ATTR`), or a cache stage when nothing
consumes the conv inside its function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from tvm import s_tir, tirx
from tvm.runtime import DataType
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..tir.conv_spec import REGISTER_TILE_ATTR
from ..tir.schedule_helpers import (
    TENSORIZE_ATTR,
    Simd,
    const_extent,
    target_simd,
    unroll_below,
)
from .base import ConvSpec
from .blocked import blocking_of

#: Output-channel vectors per tile at most (MLAS: 4).
MAX_OC_INNER = 4
#: Output columns per tile at most.
MAX_COLS = 16
#: Accumulators at most, even where more registers exist (MLAS's AVX-512 kernel: 24 of 32).
MAX_ACCUMULATORS = 24
#: Registers kept free of accumulators: weight vectors, the broadcast input, addresses.
RESERVED_REGISTERS = 4


@dataclass(frozen=True)
class RegisterTile:
    """Output-channel vectors x output columns held in registers."""

    oc_inner: int
    cols: int


def accumulator_budget(simd: Simd) -> int:
    return min(simd.registers - RESERVED_REGISTERS, MAX_ACCUMULATORS)


def vectors_per_block(out_block: int, dtype: str, simd: Simd) -> int:
    """Registers one output-channel block takes (2 for a 16-lane block on AVX2)."""
    bits = out_block * DataType(dtype).bits
    return max(-(-bits // simd.bits), 1)


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def choose_tile(out_blocks: int, out_width: int, vectors: int, simd: Simd, *,
                share_input: bool = True) -> RegisterTile:
    """The tile that needs fewest loads per FMA within the register budget.

    A step of a plain conv loads `oc_inner * vectors` weight registers and `cols`
    broadcasts for `oc_inner * cols * vectors` FMAs. A depthwise conv
    (`share_input=False`) loads one input vector per FMA whatever the tile, so there the
    tile only needs enough independent accumulators to keep the FMA units busy: one
    channel block, as many columns as fit. Sizes divide the extents (no tail tiles);
    ties go to the larger tile.
    """
    budget = accumulator_budget(simd)
    if not share_input:
        cols = max(d for d in _divisors(out_width, MAX_COLS) if d * vectors <= max(budget, 1))
        return RegisterTile(1, cols)
    best: tuple[float, int, RegisterTile] | None = None
    for oc_inner in _divisors(out_blocks, MAX_OC_INNER):
        for cols in _divisors(out_width, MAX_COLS):
            accumulators = oc_inner * cols * vectors
            if accumulators > budget and (oc_inner, cols) != (1, 1):
                continue
            loads = (oc_inner * vectors + cols) / accumulators
            key = (loads, -accumulators, RegisterTile(oc_inner, cols))
            if best is None or key[:2] <= best[:2]:  # ties: more channel vectors
                best = key
    assert best is not None
    return best[2]


def tile_for(spec: ConvSpec) -> RegisterTile:
    """`choose_tile` for a vector-layout conv on the current target."""
    cut = blocking_of(spec)
    simd = target_simd()
    vectors = vectors_per_block(cut.out_block, spec.out_dtype, simd)
    return choose_tile(cut.out_blocks, spec.out_shape[3], vectors, simd,
                       share_input=not cut.depthwise)


#: (schedule, loop, the minimal schedule's inner factor, the largest inner factor worth
#: trying) -> the loop's split factors. Unset: the minimal schedule's tile. The tuning
#: layer's vector-layout space (`dlas.tuning.metaschedule.vector_space`) sets one that
#: samples the factors, so MetaSchedule searches tile shapes around the micro-kernel.
TileSampler = Callable[[s_tir.Schedule, LoopRV, int, int], list]
TILE_SAMPLER: ContextVar[TileSampler | None] = ContextVar("dlas_tile_sampler", default=None)


def tile_split(sch: s_tir.Schedule, loop: LoopRV, inner: int, limit: int
               ) -> tuple[LoopRV, LoopRV]:
    """Split `loop` into (outer, inner) with inner factor `inner`, or as `TILE_SAMPLER`
    samples it (at most `limit`)."""
    sampler = TILE_SAMPLER.get()
    factors = [None, inner] if sampler is None else sampler(sch, loop, inner, limit)
    outer, inner_loop = sch.split(loop, factors=factors)
    return outer, inner_loop


@dataclass
class OutputLoops:
    """The loops of a vector-layout output block, named by what they index."""

    n: LoopRV
    oc: LoopRV
    y: LoopRV
    x: LoopRV
    lane: LoopRV
    reduction: list[LoopRV]


def output_loops(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> OutputLoops:
    """Name the loops of `block`, written by `blocked.stored_output`: NCHWc's are
    (n, oc, y, x, lane, *r); NHWC's (n, y, x, o, *r), o split here into (oc, lane)."""
    loops = sch.get_loops(block)
    kind = spec.out_layout_.kind
    if kind == "NCHWc":
        n, oc, y, x, lane, *reduction = loops
    elif kind == "NHWC":
        n, y, x, o, *reduction = loops
        oc, lane = sch.split(o, factors=[None, blocking_of(spec).out_block])
    else:
        raise ValueError(f"not a vector layout: {spec.out_layout}")
    return OutputLoops(n, oc, y, x, lane, list(reduction))


def schedule_register_tile(
    sch: s_tir.Schedule,
    block: SBlockRV,
    spec: ConvSpec,
    tile: RegisterTile,
    *,
    unroll: Sequence[int] = (),
    fuse_reduction: bool = False,
    dot: str | None = None,
) -> LoopRV:
    """Schedule `block` (an output of `stored_output` with a reduction) as the register-
    tiled micro-kernel; return the tile loop the epilogue is computed at.

    `unroll` indexes the reduction loops to unroll (the kernel taps of a direct conv);
    `fuse_reduction` makes the reduction one loop first (GEMM's K; with `dot`, all but the
    intrinsic's loop). `dot` names a tensor intrinsic over (lane, the last reduction
    loop), e.g. the int8 dot product (`dlas.algorithms.dot_conv`): that loop then goes
    inside the lanes, and the lane loop is marked to be tensorized once the epilogue is
    placed (`TENSORIZE_ATTR`), since tensorizing replaces the block the compiler still
    needs.
    """
    writeback = None if sch.get_consumers(block) else sch.cache_write(block, 0, "local")
    loops = output_loops(sch, block, spec)
    reduction = loops.reduction
    dotted = reduction[-1:] if dot is not None else []
    reduction = reduction[:len(reduction) - len(dotted)]
    if fuse_reduction and len(reduction) > 1:
        reduction = [sch.fuse(*reduction)]
    taps = [reduction[i] for i in unroll if i < len(reduction)]
    oc_outer, oc_inner = tile_split(sch, loops.oc, tile.oc_inner, MAX_OC_INNER * 2)
    x_outer, cols = tile_split(sch, loops.x, tile.cols, MAX_COLS * 2)
    sch.reorder(loops.n, oc_outer, loops.y, x_outer, *reduction, oc_inner, cols, loops.lane,
                *dotted)
    sch.parallel(sch.fuse(loops.n, oc_outer, loops.y))
    if dot is None:
        vectorize_lane(sch, loops.lane)
    for loop in (oc_inner, cols, *taps):
        sch.unroll(loop)
    init = sch.decompose_reduction(block, reduction[0])
    _vectorize_last(sch, init)
    if dot is not None:  # after the split: the init's copy of the lane loop stays plain
        sch.annotate(loops.lane, TENSORIZE_ATTR, dot)
    if writeback is None:
        sch.annotate(block, REGISTER_TILE_ATTR, 1)
    else:
        sch.reverse_compute_at(writeback, x_outer, preserve_unit_loops=True)
        unroll_tile(sch, writeback, x_outer)
    return x_outer


def vectorize_lane(sch: s_tir.Schedule, lane: LoopRV) -> None:
    """Vectorize a lane loop (a unit lane, e.g. NHWC with odd channels, stays scalar)."""
    extent = const_extent(sch, lane)
    if extent is not None and extent > 1:
        sch.vectorize(lane)


def _vectorize_last(sch: s_tir.Schedule, block: SBlockRV) -> None:
    last = sch.get_loops(block)[-1]
    if sch.get(last).kind == tirx.ForKind.SERIAL:
        vectorize_lane(sch, last)


def unroll_tile(sch: s_tir.Schedule, block: SBlockRV, at: LoopRV) -> None:
    """Vectorize `block`'s innermost loop and unroll the rest below `at` (a tile store)."""
    _vectorize_last(sch, block)
    unroll_below(sch, block, at)
