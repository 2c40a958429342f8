"""Block and loop helpers of the untuned schedules: queries, parallel outer, vector inner.

An untuned ("minimal") schedule does two things only: run outer spatial loops across
threads, and vectorize an innermost spatial loop where that is trivially legal. Both the
algorithms' own conv schedules (`dlas.algorithms`) and the compiler's pass over every
other block (`dlas.compiler.minimal_schedule`) make these moves, so they live here,
below both layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from tvm import ir, s_tir, tirx
from tvm.runtime import DataType
from tvm.s_tir.schedule import LoopRV, SBlockRV
from tvm.target import Target
from tvm.target.codegen import (
    llvm_get_cpu_features,
    llvm_get_system_triple,
    llvm_get_vector_width,
)
from tvm.tirx.analysis import undefined_vars
from tvm_ffi import get_global_func

_get_sblock_realize = get_global_func("s_tir.schedule.GetSBlockRealize")

#: Innermost loops up to this extent are vectorized whole; longer ones are split first.
MAX_WHOLE_VECTOR = 64
#: Vector width assumed when no LLVM target is current (AVX2).
DEFAULT_VECTOR_BITS = 256


#: x86 CPUs (LLVM names) that run each 512-bit operation on 256-bit units, in two halves:
#: AMD Zen 4. Their registers are 512 bits wide, their multiply-add throughput per cycle
#: is AVX2's.
HALF_RATE_512 = frozenset({"znver4"})


@dataclass(frozen=True)
class Simd:
    """The vector unit kernels are shaped for: register width and register count, and the
    width of the units that execute them (`datapath_bits`, None: the registers' width).

    Kernels are shaped by the registers; a choice that weighs the dense micro-kernel's
    throughput against another kernel's (`mixed_csr`'s crossover) reads `fma_bits`.
    """

    bits: int
    registers: int
    datapath_bits: int | None = None

    @property
    def fma_bits(self) -> int:
        """Bits of vector multiply-add the unit completes per instruction slot."""
        return self.datapath_bits or self.bits


#: Set by tests (`forced_simd`) to take the AVX-512 or the AVX2 path on any machine: the
#: code is built for the real target, only the shapes the schedules choose follow this.
_FORCED: ContextVar[Simd | None] = ContextVar("dlas_forced_simd", default=None)


@contextmanager
def forced_simd(bits: int, registers: int, datapath_bits: int | None = None
                ) -> Iterator[None]:
    """Schedules inside shape their kernels for this vector unit instead of the target's."""
    token = _FORCED.set(Simd(bits, registers, datapath_bits))
    try:
        yield
    finally:
        _FORCED.reset(token)


def target_features(target: Target | None = None) -> frozenset[str]:
    """The LLVM CPU features of `target` (default: the current one); none for a target
    that is not LLVM or no target."""
    target = target if target is not None else Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return frozenset()
    return frozenset(str(f) for f in llvm_get_cpu_features(target))


def target_simd(target: Target | None = None) -> Simd:
    """The SIMD unit of `target` (default: the current one; the compiler schedules inside
    `with target`).

    On x86 the target's LLVM features decide: AVX-512F 512 bits x 32 registers, AVX 256 x
    16, else SSE's 128 x 16; the mcpu says where 512-bit vectors run on 256-bit units
    (`HALF_RATE_512`). `llvm_get_vector_width` would answer 512 for every x86 mcpu in
    TVM 0.27 (znver1 and haswell included), so it is asked only for other architectures
    (AArch64: Neon's 128 bits x 32 registers).
    """
    forced = _FORCED.get()
    if forced is not None:
        return forced
    target = target if target is not None else Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return Simd(DEFAULT_VECTOR_BITS, 16)
    triple = str(target.attrs.get("mtriple", "") or "") or llvm_get_system_triple()
    if triple.startswith(("x86_64", "i686", "i386")):
        features = target_features(target)
        if "avx512f" in features:
            mcpu = str(target.attrs.get("mcpu", "") or "")
            return Simd(512, 32, 256 if mcpu in HALF_RATE_512 else None)
        return Simd(256 if "avx" in features else 128, 16)
    bits = llvm_get_vector_width(target)
    return Simd(bits if bits > 0 else 128, 32 if triple.startswith("aarch64") else 16)


def target_is_gpu(target: Target | None = None) -> bool:
    """Whether `target` (default: the current one) is a GPU (CUDA, OpenCL, ...): code for
    it is bound to blocks and threads, not SIMD registers."""
    target = target if target is not None else Target.current(allow_none=True)
    return target is not None and "gpu" in target.keys


def target_vector_bits() -> int:
    """SIMD width in bits of the current LLVM target (see `target_simd`)."""
    return target_simd().bits


def root_block(sch: s_tir.Schedule) -> SBlockRV:
    """The function's root block (named "extern" when a te.extern kernel is the function)."""
    return sch.get_sblock(sch.mod["main"].body.block.name_hint)


def leaf_blocks(sch: s_tir.Schedule) -> list[SBlockRV]:
    return list(sch.get_child_blocks(root_block(sch)))


#: Loop annotation: tensorize this loop with the named intrinsic once the function's
#: schedule is otherwise done (`tensorize_marked`), the name followed by "@" and the
#: scope of the buffer the block under it writes (an accumulator turns "local" only
#: when the compiler places the epilogue). A conv schedule marks its inner loops so:
#: tensorizing at once would replace the conv block the compiler still places the
#: epilogue against.
TENSORIZE_ATTR = "dlas.tensorize"


def tensorize_marked(sch: s_tir.Schedule) -> int:
    """Tensorize every loop marked with `TENSORIZE_ATTR`; how many there were."""
    marked: list[tuple[LoopRV, str]] = []
    for block in leaf_blocks(sch):
        for loop in sch.get_loops(block):
            node = sch.get(loop)
            name = node.annotations.get(TENSORIZE_ATTR)
            if name is not None and not any(sch.get(m).same_as(node) for m, _ in marked):
                scope = sch.get(block).writes[0].source.scope()
                marked.append((loop, f"{name}@{scope}"))
    for loop, name in marked:
        sch.unannotate(loop, TENSORIZE_ATTR)
        sch.tensorize(loop, name)
    return len(marked)


def block_name(sch: s_tir.Schedule, block: SBlockRV) -> str:
    return sch.get(block).name_hint


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


def transitive_blocks(
    sch: s_tir.Schedule, block: SBlockRV, step: Callable[[SBlockRV], list[SBlockRV]]
) -> list[SBlockRV]:
    """Blocks reachable from `block` by repeated `step` (get_producers / get_consumers),
    nearest first along a chain."""
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


def gathers_along(sch: s_tir.Schedule, block: SBlockRV, loop: LoopRV) -> bool:
    """Whether a copy stage `block` (one store) reads some buffer's innermost dimension with
    a constant step above 1 along `loop` (an index `v * s`, s > 1, of an iterator `loop`
    binds): vectorized, such a loop loads lane by lane, because TVM scalarises a strided
    ramp."""
    realize = _get_sblock_realize(sch, block)
    var = sch.get(loop).loop_var
    stmt = sch.get(block)
    bound = [iv.var for iv, value in zip(stmt.iter_vars, realize.iter_values, strict=True)
             if _uses(value, var)]
    if not bound or not isinstance(stmt.body, tirx.BufferStore):
        return False

    def scaled(expr: tirx.PrimExpr) -> bool:
        if isinstance(expr, tirx.Mul):
            for factor, other in ((expr.a, expr.b), (expr.b, expr.a)):
                if (isinstance(factor, tirx.IntImm) and abs(int(factor.value)) > 1
                        and any(_uses(other, v) for v in bound)):
                    return True
        return any(scaled(child) for child in _operands(expr))

    def strided_load(expr: tirx.PrimExpr) -> bool:
        if _is_load(expr) and expr.indices and scaled(expr.indices[-1]):
            return True
        return any(strided_load(child) for child in _operands(expr))

    return strided_load(stmt.body.value)


def _is_load(expr: tirx.PrimExpr) -> bool:
    """A buffer load (TVM 0.27's class is `ir.TensorLoad`; `tirx.BufferLoad` makes one)."""
    return hasattr(expr, "indices") and not isinstance(expr, tirx.Shuffle)


def _operands(expr: tirx.PrimExpr) -> list[tirx.PrimExpr]:
    """The operand expressions of `expr` (none for a leaf)."""
    if isinstance(expr, tirx.Select):
        return [expr.condition, expr.true_value, expr.false_value]
    if isinstance(expr, ir.Call):
        return list(expr.args)
    if isinstance(expr, tirx.Cast):
        return [expr.value]
    if _is_load(expr):
        return list(expr.indices)
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return [expr.a, expr.b]
    return []


def const_extent(sch: s_tir.Schedule, loop: LoopRV) -> int | None:
    """The loop's extent when it is a constant; None when data-dependent (CSR rows)."""
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
    """The generic minimal schedule of one block: its leading spatial loops fused and run
    in parallel, its innermost loop vectorized when spatial."""
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


def unroll_below(sch: s_tir.Schedule, block: SBlockRV, at: LoopRV) -> None:
    """Unroll the serial loops of `block` under loop `at` (a vectorized lane stays): a
    register tile's loops, so every accumulator is addressed by a constant."""
    loops = sch.get_loops(block)
    at_stmt = sch.get(at)
    index = next(i for i, lp in enumerate(loops) if sch.get(lp).same_as(at_stmt))
    for loop in loops[index + 1:]:
        if sch.get(loop).kind == tirx.ForKind.SERIAL:
            sch.unroll(loop)
