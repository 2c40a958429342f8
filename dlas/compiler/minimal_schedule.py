"""Minimal, untuned CPU schedules: thread parallelism plus trivially legal vectorization.

`tvm.compile` schedules nothing on CPU, so every PrimFunc would run as single-threaded
naive loops. The DLAS paper's untuned baseline is a "minimal schedule that uses thread
parallelism"; this module supplies it for every PrimFunc of a model:

* conv blocks (tagged by the compiler, see `dlas.algorithms.base.CONV_SPEC_ATTR`) get
  their algorithm's own `schedule`;
* the elementwise epilogue fused after a conv (bias, batch-norm, ReLU, residual add) is
  inlined into one block and computed at the conv's outer parallel loop;
* every other block: elementwise chains are inlined, then the leading spatial loops are
  fused and run in parallel, and the innermost loop is vectorized when it is spatial.

Nothing here is tuned: no tiling, no unrolling, no cache stages. Dlight's CPU rules in
TVM 0.27 cover only GEMV and softmax-like reductions, hence this module.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from tvm import s_tir, tirx
from tvm.runtime import DataType
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.tirx.analysis import undefined_vars
from tvm_ffi import get_global_func

from ..algorithms.base import CONV_ALGORITHM_ATTR, CONV_SPEC_ATTR, ConvSpec

log = logging.getLogger(__name__)

_get_sblock_realize = get_global_func("s_tir.schedule.GetSBlockRealize")

#: Innermost loops up to this extent are vectorized whole; longer ones are split first.
MAX_WHOLE_VECTOR = 64

#: A conv scheduler: (schedule, conv output block, spec) -> loop to compute consumers at.
ConvScheduler = Callable[[s_tir.Schedule, SBlockRV, ConvSpec], LoopRV | None]


def root_block(sch: s_tir.Schedule) -> SBlockRV:
    return sch.get_sblock(sch.mod["main"].body.block.name_hint)


def leaf_blocks(sch: s_tir.Schedule) -> list[SBlockRV]:
    return list(sch.get_child_blocks(root_block(sch)))


def block_name(sch: s_tir.Schedule, block: SBlockRV) -> str:
    return sch.get(block).name_hint


def conv_spec_of(sch: s_tir.Schedule, block: SBlockRV) -> ConvSpec | None:
    """The ConvSpec a conv block was tagged with, or None for any other block."""
    ann = sch.get(block).annotations
    if CONV_SPEC_ATTR not in ann:
        return None
    return ConvSpec.from_json(str(ann[CONV_SPEC_ATTR]))


def loop_kinds(sch: s_tir.Schedule, block: SBlockRV) -> list[str]:
    """Per loop around `block`: "S" (feeds only spatial iters), "R" (only reduction), "O"."""
    realize = _get_sblock_realize(sch, block)
    bindings = list(zip(sch.get(block).iter_vars, realize.iter_values, strict=True))
    kinds = []
    for loop in sch.get_loops(block):
        var = sch.get(loop).loop_var
        used = {iv.iter_type for iv, value in bindings if _uses(value, var)}
        if used <= {tirx.IterVar.DataPar}:
            kinds.append("S")
        elif used == {tirx.IterVar.CommReduce}:
            kinds.append("R")
        else:
            kinds.append("O")
    return kinds


def _uses(expr: tirx.PrimExpr, var: tirx.Var) -> bool:
    return any(v.same_as(var) for v in undefined_vars(expr))


def const_extent(sch: s_tir.Schedule, loop: LoopRV) -> int | None:
    extent = sch.get(loop).extent
    return int(extent.value) if isinstance(extent, tirx.IntImm) else None


def is_parallelized(sch: s_tir.Schedule, block: SBlockRV) -> bool:
    return any(sch.get(lp).kind == tirx.ForKind.PARALLEL for lp in sch.get_loops(block))


def vector_lanes(vector_bits: int, dtype: str) -> int:
    """Lanes of one SIMD register for `dtype` (at least 4, so narrow targets still pack)."""
    bits = DataType(dtype).bits
    return max(vector_bits // max(bits, 8), 4)


def block_lanes(sch: s_tir.Schedule, block: SBlockRV, vector_bits: int) -> int:
    writes = sch.get(block).writes
    dtype = str(writes[0].source.dtype) if writes else "float32"
    return vector_lanes(vector_bits, dtype)


def vectorize_innermost(
    sch: s_tir.Schedule, block: SBlockRV, lanes: int, skip: Iterable[LoopRV] = ()
) -> LoopRV | None:
    """Vectorize the innermost loop of `block` if it is spatial; return the vector loop.

    Extents up to MAX_WHOLE_VECTOR are vectorized whole (LLVM splits them into registers);
    longer ones are split by `lanes` when that divides evenly (no tail predicate, so the
    vectorization stays trivially legal), otherwise left scalar.
    """
    loops = sch.get_loops(block)
    if not loops or any(sch.get(loops[-1]).same_as(sch.get(s)) for s in skip):
        return None
    if loop_kinds(sch, block)[-1] != "S" or sch.get(loops[-1]).kind != tirx.ForKind.SERIAL:
        return None
    extent = const_extent(sch, loops[-1])
    if extent is None or extent < 2:
        return None
    if extent <= MAX_WHOLE_VECTOR:
        sch.vectorize(loops[-1])
        return loops[-1]
    if extent % lanes == 0:
        _, inner = sch.split(loops[-1], factors=[None, lanes])
        sch.vectorize(inner)
        return inner
    return None


def parallelize_block(sch: s_tir.Schedule, block: SBlockRV, vector_bits: int) -> None:
    """The generic minimal schedule of one block (see module docstring)."""
    loops = sch.get_loops(block)
    if not loops:
        return
    kinds = loop_kinds(sch, block)
    lanes = block_lanes(sch, block, vector_bits)
    lead = len(kinds) - len("".join(kinds).lstrip("S"))
    if lead == len(kinds):
        # Injective: parallel over all but the innermost loop, vectorize the innermost.
        if len(loops) == 1:
            extent = const_extent(sch, loops[0])
            if extent is not None and extent % lanes == 0 and extent > lanes:
                outer, inner = sch.split(loops[0], factors=[None, lanes])
                sch.parallel(outer)
                sch.vectorize(inner)
            else:
                sch.parallel(loops[0])
            return
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        sch.parallel(outer)
        vectorize_innermost(sch, block, lanes)
        return
    if lead == 0:
        return  # a full reduction (e.g. a global sum): no spatial loop to split safely
    outer = sch.fuse(*loops[:lead]) if lead > 1 else loops[0]
    sch.parallel(outer)
    vectorize_innermost(sch, block, lanes, skip=[outer])


def _transitive(
    sch: s_tir.Schedule, block: SBlockRV, step: Callable[[SBlockRV], list[SBlockRV]]
) -> list[SBlockRV]:
    """Blocks reachable from `block` by repeated `step` (get_producers / get_consumers)."""
    seen: dict[str, SBlockRV] = {}
    frontier = [block]
    while frontier:
        current = frontier.pop()
        for nxt in step(current):
            name = block_name(sch, nxt)
            if name not in seen:
                seen[name] = nxt
                frontier.append(nxt)
    return list(seen.values())


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
    """Inline the conv's elementwise consumers and compute what is left at loop `at`."""
    consumers = _transitive(sch, conv_block, sch.get_consumers)
    outputs = {block_name(sch, b) for b in sch.get_output_blocks(root_block(sch))}
    # Intermediate consumers fold into the last one: relu((conv - m) / s * g + b) is one block.
    finals = [b for b in consumers if block_name(sch, b) in outputs]
    intermediates = [b for b in consumers if block_name(sch, b) not in outputs]
    finals += try_inline(sch, intermediates)
    for blk in finals:
        if at is not None:
            try:
                sch.reverse_compute_at(blk, at, preserve_unit_loops=True)
                vectorize_innermost(sch, blk, block_lanes(sch, blk, vector_bits))
                continue
            except Exception as err:  # noqa: BLE001 - fall back to a standalone loop nest
                log.debug("epilogue %s not computed at conv loop: %s", block_name(sch, blk), err)
        parallelize_block(sch, blk, vector_bits)


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
            owned.update(block_name(sch, b) for b in _transitive(sch, blk, sch.get_producers))
    for blk, algo, spec in convs:
        at = conv_schedulers[algo](sch, blk, spec)
        schedule_epilogue(sch, blk, at, vector_bits)
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
