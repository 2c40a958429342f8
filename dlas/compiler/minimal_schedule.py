"""Minimal, untuned CPU schedules: thread parallelism plus trivially legal vectorization.

`tvm.compile` schedules nothing on CPU, so every PrimFunc would run as single-threaded
naive loops. The DLAS paper's untuned baseline is a "minimal schedule that uses thread
parallelism"; this module supplies it for every PrimFunc of a model:

* conv blocks (tagged by the compiler, see `dlas.tir.conv_spec.CONV_SPEC_ATTR`) get
  their algorithm's own `schedule`;
* the elementwise epilogue fused after a conv (bias, batch-norm, ReLU, residual add) is
  inlined into one block and computed at the conv's outer parallel loop;
* every other block: elementwise chains are inlined, then the leading spatial loops are
  fused and run in parallel, and the innermost loop is vectorized when it is spatial.

Nothing here is tuned: no tiling, no unrolling, no cache stages. Dlight's CPU rules in
TVM 0.27 cover only GEMV and softmax-like reductions, hence this module. The block and
loop moves themselves are in `dlas.tir.schedule_helpers`, shared with the algorithms.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tvm import s_tir, tirx
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..tir.conv_spec import CONV_ALGORITHM_ATTR, REGISTER_TILE_ATTR, ConvSpec, conv_spec_of
from ..tir.schedule_helpers import (
    block_lanes,
    block_name,
    is_parallelized,
    leaf_blocks,
    parallelize_block,
    root_block,
    tensorize_marked,
    transitive_blocks,
    unroll_below,
    vectorize_innermost,
)

log = logging.getLogger(__name__)

#: A conv scheduler: (schedule, conv output block, spec) -> loop to compute consumers at.
ConvScheduler = Callable[[s_tir.Schedule, SBlockRV, ConvSpec], LoopRV | None]


def try_inline(sch: s_tir.Schedule, blocks: list[SBlockRV]) -> list[SBlockRV]:
    """Inline elementwise blocks into their consumers (or producers) while any step works."""
    remaining = list(blocks)
    progress = True
    while progress:
        progress = False
        for primitive in (sch.compute_inline, sch.reverse_compute_inline):
            for i, blk in enumerate(remaining):
                try:
                    primitive(blk)
                except Exception:  # noqa: BLE001 - a refused inline is the normal case
                    continue
                remaining.pop(i)
                progress = True
                break
            if progress:
                break
    return remaining


def schedule_epilogue(
    sch: s_tir.Schedule, conv_block: SBlockRV, at: LoopRV | None, vector_bits: int
) -> None:
    """Inline the conv's elementwise consumers and compute what is left at loop `at`.

    A conv block its schedule computes in register tiles (`REGISTER_TILE_ATTR`) then
    keeps its output in a "local" buffer, once every consumer sits at the tile loop, and
    the epilogue's tile loops are unrolled so they address the accumulators directly.
    """
    tiled = REGISTER_TILE_ATTR in sch.get(conv_block).annotations
    # a conv schedule may have placed some itself (a register tile's write-back stage)
    consumers = [b for b in transitive_blocks(sch, conv_block, sch.get_consumers)
                 if not is_parallelized(sch, b)]
    outputs = {block_name(sch, b) for b in sch.get_output_blocks(root_block(sch))}
    # Intermediate consumers fold into the last one: relu((conv - m) / s * g + b) is one block.
    finals = [b for b in consumers if block_name(sch, b) in outputs]
    intermediates = [b for b in consumers if block_name(sch, b) not in outputs]
    finals += try_inline(sch, intermediates)
    placed = bool(finals)
    for blk in finals:
        if at is not None:
            try:
                sch.reverse_compute_at(blk, at, preserve_unit_loops=True)
                vectorize_innermost(sch, blk, block_lanes(sch, blk, vector_bits))
                if tiled:
                    unroll_below(sch, blk, at)
                continue
            except Exception as err:  # noqa: BLE001 - fall back to a standalone loop nest
                log.debug("epilogue %s not computed at conv loop: %s", block_name(sch, blk), err)
        placed = False
        parallelize_block(sch, blk, vector_bits)
    if tiled and placed:
        sch.set_scope(conv_block, 0, "local")



def schedule_prim_func(
    func: tirx.PrimFunc,
    conv_schedulers: dict[str, ConvScheduler],
    vector_bits: int,
) -> tuple[tirx.PrimFunc, list[str]]:
    """Apply minimal schedules to one PrimFunc; return it and warnings for serial blocks.

    `conv_schedulers` maps an algorithm name to its schedule function; conv blocks
    tagged with another algorithm's name are an error.
    """
    sch = s_tir.Schedule(func)
    warnings = schedule_blocks(sch, conv_schedulers, vector_bits)
    return sch.mod["main"], warnings


def schedule_blocks(
    sch: s_tir.Schedule,
    conv_schedulers: dict[str, ConvScheduler],
    vector_bits: int,
) -> list[str]:
    """`schedule_prim_func` on a schedule the caller owns (MetaSchedule's sparse space
    traces it, with conv schedulers that sample their tile sizes)."""
    warnings: list[str] = []
    before = {block_name(sch, b) for b in leaf_blocks(sch)}
    convs = []
    owned: set[str] = set()  # conv stages: left as the algorithm's schedule made them
    for blk in leaf_blocks(sch):
        spec = conv_spec_of(sch, blk)
        if spec is not None:
            algo = str(sch.get(blk).annotations[CONV_ALGORITHM_ATTR])
            if algo not in conv_schedulers:
                raise KeyError(f"conv block {block_name(sch, blk)} made by unknown {algo!r}")
            convs.append((blk, algo, spec))
            owned.add(block_name(sch, blk))
            owned.update(block_name(sch, b) for b in transitive_blocks(sch, blk, sch.get_producers))
    for blk, algo, spec in convs:
        at = conv_schedulers[algo](sch, blk, spec)
        schedule_epilogue(sch, blk, at, vector_bits)
    tensorize_marked(sch)  # last: it replaces the conv blocks placed against above
    # Blocks the algorithm's schedule created (init, cache or packing stages) are its own too.
    owned.update({block_name(sch, b) for b in leaf_blocks(sch)} - before)
    # Everything else not yet under a parallel loop: inline elementwise chains, parallelize.
    todo = [
        b
        for b in leaf_blocks(sch)
        if block_name(sch, b) not in owned and not is_parallelized(sch, b)
    ]
    if not convs:
        todo = try_inline(sch, todo)
    for blk in todo:
        name = block_name(sch, blk)
        try:
            parallelize_block(sch, blk, vector_bits)
        except Exception as err:  # noqa: BLE001 - leave the block serial, but say so
            warnings.append(f"block {name}: left serial ({type(err).__name__})")
            log.debug("minimal schedule failed on %s: %s", name, err)
    return warnings
