"""MetaSchedule's search space for convs in the vector layouts (NHWC, NCHWc).

MetaSchedule's generic space tiles a conv's loops without knowing the register-tiled
micro-kernel the vector layouts are built for (`dlas.algorithms.microkernel`): most of
its samples scatter the accumulators over memory, and a small trial budget rarely finds
one that beats the hand-written tile. So a vector-layout task searches the union of

* **the micro-kernel's space**: the algorithm's own schedule, with the register tile's
  shape sampled instead of chosen (`TILE_SAMPLER`): the output-channel vectors and the
  output columns a tile holds (`sample_perfect_tile`, mutated by `MutateTileSize`), and
  an explicit-unroll depth for the rest (`MutateUnroll`); the minimal schedule's tile is
  one point of it, and is measured first (`minimal_candidate`), so the search starts from
  it; and
* **MetaSchedule's generic space** for the same task, so nothing the default search
  could find is lost.
"""

from __future__ import annotations

from collections.abc import Mapping

import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import LoopRV

from dlas.algorithms.microkernel import TILE_SAMPLER
from dlas.compiler.minimal_schedule import ConvScheduler, schedule_blocks
from dlas.tir.schedule_helpers import const_extent, root_block

#: Explicit-unroll depths sampled for what the micro-kernel does not unroll itself.
UNROLL_DEPTHS = (0, 16, 64)


def _sampled_split(sch: s_tir.Schedule, loop: LoopRV, inner: int, limit: int) -> list:
    extent = const_extent(sch, loop) or inner
    return sch.sample_perfect_tile(loop, n=2, max_innermost_factor=max(1, min(limit, extent)))


def vector_space(schedulers: Mapping[str, ConvScheduler], target: tvm.target.Target,
                 vector_bits: int) -> ms.space_generator.SpaceGeneratorUnion:
    """The search space of a task holding vector-layout convs (see the module docstring)."""

    def apply(sch: s_tir.Schedule) -> None:
        token = TILE_SAMPLER.set(_sampled_split)
        try:
            with target:
                schedule_blocks(sch, dict(schedulers), vector_bits)
        finally:
            TILE_SAMPLER.reset(token)
        depth = sch.sample_categorical(
            candidates=list(UNROLL_DEPTHS), probs=[1.0 / len(UNROLL_DEPTHS)] * len(UNROLL_DEPTHS))
        sch.annotate(root_block(sch), "meta_schedule.unroll_explicit", depth)

    micro_kernel = ms.space_generator.ScheduleFn(apply, sch_rules=[], postprocs=[],
                                                 mutator_probs={})
    generic = ms.space_generator.PostOrderApply()
    return ms.space_generator.SpaceGeneratorUnion([micro_kernel, generic])
