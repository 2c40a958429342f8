"""Loop moves shared by the algorithms' minimal schedules (parallel outer, vector inner).

Each helper does one of the two things an untuned schedule may do: run an outer spatial
loop across threads, or vectorize an innermost spatial loop where that is trivially
legal. Tiling, unrolling and cache stages are left to tuning. The block-level helpers
they build on (`dlas.tir.schedule_helpers`) are shared with the compiler's pass over
non-conv blocks; this module holds what only conv schedules need.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from tvm import s_tir, tirx
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..tir.schedule_helpers import (
    MAX_WHOLE_VECTOR,
    const_extent,
    gathers_along,
    is_parallelized,
    parallelize_block,
    target_vector_bits,
    vector_lanes,
)


def parallel_outer(sch: s_tir.Schedule, loops: list[LoopRV]) -> LoopRV:
    """Fuse `loops` (outermost first) into one loop and run it across threads."""
    outer = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(outer)
    return outer


def vectorize_loop(sch: s_tir.Schedule, loop: LoopRV, dtype: str) -> LoopRV | None:
    """Vectorize `loop` whole (short) or split by the SIMD lanes (when that divides)."""
    extent = const_extent(sch, loop)
    if extent is None or extent < 2:
        return None
    if extent <= MAX_WHOLE_VECTOR:
        sch.vectorize(loop)
        return loop
    lanes = vector_lanes(target_vector_bits(), dtype)
    if extent % lanes:
        return None
    _, inner = sch.split(loop, factors=[None, lanes])
    sch.vectorize(inner)
    return inner


def vectorize_copy(sch: s_tir.Schedule, block: SBlockRV, dtype: str) -> None:
    """Vectorize a copy stage's innermost loop (`vectorize_loop`), unless the stage gathers
    along it (`gathers_along`: a strided conv's phase packing or im2col). That loop is
    unrolled instead (whole, or by the SIMD lanes), and LLVM's SLP vectorizer makes its
    lanes whole-vector loads and shuffles, where TVM's vectorizer loads lane by lane. A
    stride-2 phase pack of 80 channels at 32x32: 23.9 us vectorized, 9.2 unrolled (Xeon
    Cascade Lake, 2 threads)."""
    loop = sch.get_loops(block)[-1]
    if not gathers_along(sch, block, loop):
        vectorize_loop(sch, loop, dtype)
        return
    extent = const_extent(sch, loop)
    if extent is None or extent < 2:
        return
    lanes = vector_lanes(target_vector_bits(), dtype)
    if extent > MAX_WHOLE_VECTOR:
        if extent % lanes:
            return
        _, loop = sch.split(loop, factors=[None, lanes])
    sch.unroll(loop)


def vectorize_under_reduction(
    sch: s_tir.Schedule,
    block: SBlockRV,
    reduction: list[LoopRV],
    vector: list[LoopRV],
    dtype: str,
) -> None:
    """Move the reduction loops outside the `vector` spatial loops and vectorize those.

    The output stays in place while the reduction runs (loops over spatial outputs may
    always move inward); the zero-initialisation is split off (`decompose_reduction`)
    and vectorized the same way. `vector` loops are fused first when there are several.
    """
    sch.reorder(*reduction, *vector)
    inner = sch.fuse(*vector) if len(vector) > 1 else vector[0]
    if vectorize_loop(sch, inner, dtype) is None:
        return
    init = sch.decompose_reduction(block, reduction[0])
    init_inner = sch.get_loops(init)[-1]
    if sch.get(init_inner).kind != tirx.ForKind.VECTORIZED:
        vectorize_loop(sch, init_inner, dtype)


def parallelize_producers(sch: s_tir.Schedule, block: SBlockRV) -> None:
    """Give every not-yet-parallel producer stage (padding, im2col, packing) the generic
    minimal schedule: leading loops fused in parallel, innermost vectorized."""
    bits = target_vector_bits()
    for producer in sch.get_producers(block):
        if not is_parallelized(sch, producer):
            parallelize_block(sch, producer, bits)


#: (schedule, row block, dtype, vector_loops) -> the row's parallel loop.
CSRRowRule = Callable[[s_tir.Schedule, SBlockRV, str, int], LoopRV]

#: The schedule every CSR kernel's row nest gets. Unset: the minimal one below. The
#: tuning layer's sparse search space (`dlas.tuning.metaschedule.sparse_space`) sets a
#: rule that samples tile sizes instead, so each algorithm keeps scheduling its own
#: packing/im2col stages and only the data-dependent nest becomes a search space.
CSR_ROW_RULE: ContextVar[CSRRowRule | None] = ContextVar("dlas_csr_row_rule", default=None)


def schedule_csr_rows(sch: s_tir.Schedule, row: SBlockRV, dtype: str, vector_loops: int) -> LoopRV:
    """Minimal schedule of a CSR kernel (a row block holding its update block).

    The row block's (n, o) loops run in parallel: each thread owns whole output-channel
    planes, whose non-zero count varies per row. In the update block, the data-dependent
    loop over the row's entries is already outside the spatial loops; the innermost
    `vector_loops` spatial loops are vectorized (fused when there are two).
    """
    rule = CSR_ROW_RULE.get()
    if rule is not None:
        return rule(sch, row, dtype, vector_loops)
    outer = parallel_outer(sch, sch.get_loops(row))
    update, loops, j = csr_update_loops(sch, row)
    vector = loops[-vector_loops:]
    vectorize_under_reduction(sch, update, [loops[j]], vector, dtype)
    return outer


def csr_update_loops(sch: s_tir.Schedule, row: SBlockRV) -> tuple[SBlockRV, list[LoopRV], int]:
    """The update block inside a CSR row block, its loops, and the index of the
    data-dependent loop over the row's non-zeros among them."""
    (update,) = sch.get_child_blocks(row)
    loops = sch.get_loops(update)
    kinds = [_loop_is_data_dependent(sch, lp) for lp in loops]
    return update, loops, kinds.index(True)


def _loop_is_data_dependent(sch: s_tir.Schedule, loop: LoopRV) -> bool:
    return const_extent(sch, loop) is None


def parallelize_rows(sch: s_tir.Schedule, block: SBlockRV, lead: int, dtype: str) -> None:
    """A copy stage's minimal schedule for large row counts: its first `lead` loops
    fused and run in parallel, the innermost vectorized (whole, or by the SIMD lanes),
    the loops between kept nested. Fusing every loop but the innermost, as
    `parallelize_block` does, computes each index by division from the fused counter:
    for a copy of short channel runs (im2col, packing, padding in NCHWc) that division
    costs more than the copy."""
    loops = sch.get_loops(block)
    lead = max(1, min(lead, len(loops) - 1))
    sch.parallel(sch.fuse(*loops[:lead]) if lead > 1 else loops[0])
    vectorize_copy(sch, block, dtype)


def parallelize_padding(sch: s_tir.Schedule, block: SBlockRV, rows: int, dtype: str) -> None:
    """`parallelize_rows` for each padding stage feeding `block` (none when unpadded)."""
    for producer in sch.get_producers(block):
        if not is_parallelized(sch, producer):
            parallelize_rows(sch, producer, rows, dtype)
