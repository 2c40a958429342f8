"""Sparse sketch rules: MetaSchedule's search space for the CSR convolutions.

MetaSchedule's default space rejects a CSR kernel: the loop over a row's non-zeros has a
data-dependent extent (`indptr[r + 1] - indptr[r]`), which its `DisallowDynamicLoop`
postprocessor refuses and its multi-level tiling cannot split. The DLAS paper tuned sparse
code with custom sketch rules; this is ours. It keeps each algorithm's own schedule for
its packing/im2col stages and the fused epilogue (the minimal schedule), and turns the
row nest of every CSR kernel into a space with three sampled decisions:

* **output blocking**: the first spatial loop under the data-dependent loop is split
  (`sample_perfect_tile`) and its outer part moved outside the loop over non-zeros, so
  a tile of the output stays in cache while all of the row's weights stream past it
  (factor 1 keeps the untuned order, the full extent puts each output row outermost);
* **vector length**: the innermost spatial loop is split by a sampled factor whose
  inner part is vectorized;
* **unrolling**: `sample_categorical` over explicit-unroll depths for the nest.

MetaSchedule's evolutionary search mutates these decisions (`MutateTileSize`,
`MutateUnroll`) and its cost model ranks them like any other candidate.

On a GPU the CSR kernels are row kernels (one thread block per output-channel row, its
pixels over threads; `dlas.compiler.gpu_schedule`), and `gpu_csr_space` samples that
schedule's threads per block for every nest and the unrolling of the non-zero loop
(`MutateThreadBinding`, `MutateUnroll`), its candidates checked against the GPU's limits
(`VerifyGPUCode`).

The NCHW CSR algorithms' pixel-tile kernel (`dlas.algorithms.spmm_kernel`) is one opaque
block whose loops no primitive reaches; its decisions (tile size, chunks taken at once,
loop order) are sampled with `sample_categorical` and written on the block as
annotations, which the build turns into the kernel (`dlas.algorithms.spmm_rebuild`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import LoopRV, SBlockRV

from dlas.algorithms.schedule_util import CSR_ROW_RULE, csr_update_loops, parallel_outer
from dlas.algorithms.spmm_kernel import BUILT_ATTR
from dlas.algorithms.spmm_rebuild import REQUESTS, choices
from dlas.algorithms.spmm_tiling import built_of
from dlas.compiler.gpu_schedule import ThreadCount, bind_blocks
from dlas.compiler.minimal_schedule import ConvScheduler, schedule_blocks
from dlas.tir.schedule_helpers import const_extent, root_block, vector_lanes

#: Explicit-unroll depths the space samples from (0 = no unrolling), as MetaSchedule's
#: own CPU rule (`ParallelizeVectorizeUnroll`) offers.
UNROLL_DEPTHS = (0, 16, 64, 512)
#: Longest vector loop the space offers (in lanes of 32-bit values: 4 AVX-512 registers).
MAX_VECTOR = 64


def sample_uniform(sch: s_tir.Schedule, values: list[Any]) -> s_tir.schedule.ExprRV:
    """One of `values`, each as likely (a traced decision MetaSchedule can mutate)."""
    return sch.sample_categorical(candidates=list(values), probs=[1.0 / len(values)] * len(values))


def sample_unroll(sch: s_tir.Schedule) -> None:
    """A sampled explicit-unroll depth for the whole function (`UNROLL_DEPTHS`), turned
    into loop pragmas by `RewriteParallelVectorizeUnroll`."""
    sch.annotate(root_block(sch), "meta_schedule.unroll_explicit",
                 sample_uniform(sch, list(UNROLL_DEPTHS)))


def sampled_csr_rows(vector_bits: int):
    """A `CSRRowRule` that samples blocking, vector length and unrolling (see module doc)."""

    def rule(sch: s_tir.Schedule, row: SBlockRV, dtype: str, vector_loops: int) -> LoopRV:
        outer = parallel_outer(sch, sch.get_loops(row))
        update, loops, j = csr_update_loops(sch, row)
        reduction = loops[j]
        spatial = loops[j + 1:]
        if len(spatial) >= 2 and (const_extent(sch, spatial[0]) or 1) > 1:
            extent = const_extent(sch, spatial[0])
            factors = sch.sample_perfect_tile(spatial[0], n=2, max_innermost_factor=extent)
            block_outer, block_inner = sch.split(spatial[0], factors=factors)
            sch.reorder(block_outer, reduction)
            spatial = [block_inner, *spatial[1:]]
        innermost = spatial[-1] if spatial else None
        extent = const_extent(sch, innermost) if innermost is not None else None
        if extent is not None and extent >= 2:
            limit = min(extent, max(MAX_VECTOR, vector_lanes(vector_bits, dtype)))
            factors = sch.sample_perfect_tile(innermost, n=2, max_innermost_factor=limit)
            _, lanes = sch.split(innermost, factors=factors)
            sch.vectorize(lanes)
            init = sch.decompose_reduction(update, reduction)
            sch.vectorize(sch.get_loops(init)[-1])
        sample_unroll(sch)
        return outer

    return rule


def sample_spmm_decisions(sch: s_tir.Schedule) -> int:
    """Sample the pixel-tile sparse kernel's decisions (`dlas.algorithms.spmm_rebuild`:
    tile size, chunks taken at once, loop order) for every kernel block of `sch`, as
    annotations the build turns into the kernel; returns how many blocks it sampled."""
    sampled = 0
    for block in _kernel_blocks(sch):
        grid, built = built_of(str(sch.get(block).annotations[BUILT_ATTR]))
        for field, values in choices(grid, built).items():
            if len(values) < 2:
                continue
            decision = sample_uniform(sch, values)
            sch.annotate(block, REQUESTS[field], decision)
        sampled += 1
    return sampled


def _kernel_blocks(sch: s_tir.Schedule) -> list[SBlockRV]:
    return [block for block in sch.get_child_blocks(root_block(sch))
            if BUILT_ATTR in sch.get(block).annotations]


def csr_space(
    schedulers: Mapping[str, ConvScheduler], target: tvm.target.Target, vector_bits: int
) -> ms.space_generator.ScheduleFn:
    """The search space of a task holding CSR kernels (and whatever is fused with them)."""

    def apply(sch: s_tir.Schedule) -> None:
        token = CSR_ROW_RULE.set(sampled_csr_rows(vector_bits))
        try:
            with target:
                schedule_blocks(sch, dict(schedulers), vector_bits)
                sample_spmm_decisions(sch)
        finally:
            CSR_ROW_RULE.reset(token)

    return ms.space_generator.ScheduleFn(
        apply,
        sch_rules=[],
        # Turns the sampled unroll depth into loop pragmas; the dynamic loop is left
        # alone (no DisallowDynamicLoop, which is what rejects CSR in the default space).
        postprocs=[ms.postproc.RewriteParallelVectorizeUnroll()],
        # the block-CSR rows' tile sizes and unrolling; the pixel-tile kernel's categorical
        # decisions are resampled in each generation's fresh candidates
        mutator_probs={ms.mutator.MutateTileSize(): 0.8, ms.mutator.MutateUnroll(): 0.2},
    )


#: Threads per block the GPU sparse space samples (a warp to half the block limit).
GPU_THREADS = (32, 64, 128, 256, 512)


def sampled_threads(sch: s_tir.Schedule) -> ThreadCount:
    """A `ThreadCount` that samples each nest's threads per block from `GPU_THREADS`, no
    more than its spatial extent; MetaSchedule's `MutateThreadBinding` mutates them."""

    def count(extent: int | None, with_blocks: bool) -> int | s_tir.schedule.ExprRV:
        options = sorted({min(t, extent) if extent else t for t in GPU_THREADS})
        if len(options) == 1:
            return options[0]
        return sample_uniform(sch, options)

    return count


def gpu_csr_space(target: tvm.target.Target) -> ms.space_generator.ScheduleFn:
    """The search space of a task holding GPU CSR kernels: the untuned schedule's shape
    (one block per output-channel row, its pixels over threads, each thread walking the
    row's non-zeros; `dlas.compiler.gpu_schedule`), with the threads per block of every
    nest and the explicit unrolling of the non-zero loop sampled. The paper tuned no
    sparse model on a GPU: this is the space that lets dlas."""

    def apply(sch: s_tir.Schedule) -> None:
        with target:
            bind_blocks(sch, sampled_threads(sch))
        sample_unroll(sch)

    return ms.space_generator.ScheduleFn(
        apply,
        sch_rules=[],
        # the unroll pragmas; the GPU's own limits (threads, shared memory) checked; the
        # dynamic loop left alone (no DisallowDynamicLoop)
        postprocs=[ms.postproc.RewriteParallelVectorizeUnroll(), ms.postproc.VerifyGPUCode()],
        mutator_probs={ms.mutator.MutateThreadBinding(): 0.5, ms.mutator.MutateUnroll(): 0.5},
    )
