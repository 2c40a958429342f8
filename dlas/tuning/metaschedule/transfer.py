"""Transfer-tuning: the schedules tuned for one workload, replayed on another of its kind.

Gibson & Cano (PACT 2022) reuse the auto-schedules of tuned kernels on new kernels of the
same structure but other shapes: a ResNet's 3x3 convs share one loop nest whatever their
channels and resolution, so the best trace found for one is a good start for another,
for no search at all. Here

* `structure_key` is the shape-free identity of a task: two tasks with the same key have
  the same blocks with the same loop nests, so a trace recorded on one replays on the
  other (what changes is the loop extents, hence the tile sizes);
* `transfer_candidates` takes the best record of every *other* workload of the database
  with the task's key, nearest in size first, and replays it on the task: without its
  postprocessing part, with its tile decisions adapted to the new extents, then with the
  task's own postprocessors. What comes out is a traced schedule of the task's module,
  ready to be measured and committed as a tuning record of the task.

How decisions are adapted (`_adapt`): a `SamplePerfectTile` decision whose product is not
the new loop extent keeps, innermost first, the largest part of each inner factor that
still divides what is left of the extent (its gcd with it), and puts the rest outermost:
an innermost tile of 8 on a loop grown from 16 to 24 stays 8, on one of 12 it becomes 4.
(TVM repairs a stale decision itself, but the other way round: a factor that does not
divide takes the whole remainder, so [1, 2, 1, 6] on a loop of 8 becomes [1, 1, 1, 8],
everything innermost, past `max_innermost_factor` on large loops; the gcd never grows
the innermost factor.) A `SamplePartitionedTile` decision is adapted the same way and
dropped (re-sampled from the schedule's fixed seed, so replay stays deterministic) when
the result breaks its `innerpart_factor`. Categorical decisions (unroll depths) do not
depend on extents and are kept; compute locations are kept too (TVM moves a location
that no longer exists to the one before it); if the replay fails all the same, it is
tried once more with the compute locations re-sampled. A candidate whose replay or any
postprocessor fails is skipped, with the reason at debug level.

Postprocessors: they are passed in already initialised, as `TuneContext` leaves them
(`ms.TuneContext(mod=task.mod, target=..., space_generator=...)` initialises its space
generator, which initialises its postprocessors with the context, the target included);
`ctx.space_generator.postprocs` is the list to pass. They are applied as MetaSchedule's
own search applies them to a candidate: replay with `remove_postproc=True`,
`sch.enter_postproc()`, then each `postproc.apply(sch)`, any False rejecting it. The
resulting trace holds the postprocessing instructions, so `MetaScheduleApplyDatabase`,
which replays with `remove_postproc=False`, rebuilds exactly the candidate's module.

The source's minimal schedule (the hand-written record `minimal_candidate` stores, which
the ledger identifies by `minimal_key`) is not transferred: it was written for the
source's shapes, and the task gets its own minimal schedule measured anyway. A source
whose best record does not replay falls back to its next best one (at most
`_TRIES_PER_SOURCE`), still at most one candidate per source workload.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import SBlockRV

from dlas.tir.conv_spec import CONV_ALGORITHM_ATTR, CONV_SPEC_ATTR
from dlas.tir.schedule_helpers import root_block
from dlas.tuning.metaschedule.database import TuningDatabase, workload_key
from dlas.tuning.metaschedule.tasks import Task

log = logging.getLogger(__name__)

#: Records of one source tried, best first, before the source is given up.
_TRIES_PER_SOURCE = 3
#: MetaSchedule stores a failed run as this many seconds (or more).
_FAILED_RUN_S = 1e9
#: The replay's random state: re-sampled decisions are the same on every call.
_SEED = 1


@dataclass
class TransferCandidate:
    #: Traced schedule of the *target* task's mod, postprocessed.
    schedule: s_tir.Schedule
    #: The source workload's task name (its ledger entry's), else its `workload_key`.
    source_task: str
    #: `workload_key` of the source workload's module.
    source_key: str
    #: The source record's mean run time, in microseconds.
    source_us: float


# --- structure -----------------------------------------------------------------------------

_ITER_KINDS = {0: "S", 2: "R"}  # IterVar.DataPar, IterVar.CommReduce; others by number


def _blocks_in_order(sch: s_tir.Schedule) -> list[SBlockRV]:
    """Every block of the function, nested ones included, in program order (pre-order)."""
    out: list[SBlockRV] = []

    def visit(parent: SBlockRV) -> None:
        for child in sch.get_child_blocks(parent):
            out.append(child)
            visit(child)

    visit(root_block(sch))
    return out


def _type_of(node: object) -> str:
    """A node's type, as a buffer's dtype for buffers (TVM 0.27 buffers are typed Vars)."""
    ty = getattr(node, "ty", None)
    if ty is None:
        return ""
    dtype = getattr(ty, "dtype", None)
    return str(dtype) if dtype is not None else str(ty)


def _rank(node: object) -> int | None:
    shape = getattr(getattr(node, "ty", None), "shape", None)
    return len(shape) if shape is not None else None


def _expr_shape(expr: object) -> object:
    """The operations of a value, without what depends on shapes: a load is its dtype (not
    its indices, which hold strides and paddings), a constant its type (not its value),
    and a padding's condition is left out (it holds which sides are padded)."""
    kind = type(expr).__name__
    ty = _type_of(expr)
    if "Load" in kind:
        return f"load:{ty}"
    if kind in ("IntImm", "FloatImm", "StringImm", "Var", "SizeVar"):
        return f"{kind}:{ty}"
    if hasattr(expr, "op") and hasattr(expr, "args"):  # a call: tirx.exp, if_then_else, ...
        name = str(getattr(expr.op, "name", type(expr.op).__name__))
        args = list(expr.args)
        if name.endswith("if_then_else"):
            args = args[1:]
        return [f"call:{name}:{ty}", *map(_expr_shape, args)]
    # arithmetic, comparisons, casts, selects (whose condition is left out, as above)
    children = [_expr_shape(getattr(expr, f)) for f in
                ("a", "b", "value", "true_value", "false_value") if hasattr(expr, f)]
    return [f"{kind}:{ty}", *children]


def _stmt_shape(stmt: object) -> object:
    if stmt is None:
        return None
    if isinstance(stmt, tirx.BufferStore):
        return [f"store:{_type_of(stmt.buffer)}", _expr_shape(stmt.value)]
    return type(stmt).__name__  # a loop nest around nested blocks: they are listed apart


def _structure(mod: tvm.IRModule) -> list:
    """What `structure_key` hashes (readable, for debugging)."""
    func = mod["main"]
    sch = s_tir.Schedule(mod)
    params = [(_type_of(p), _rank(p)) for p in func.params]
    blocks = []
    for rv in _blocks_in_order(sch):
        block = sch.get(rv)
        loops = [sch.get(lp) for lp in sch.get_loops(rv)]
        ann = block.annotations
        blocks.append({
            "name": block.name_hint,
            "iters": "".join(_ITER_KINDS.get(int(iv.iter_type), str(int(iv.iter_type)))
                             for iv in block.iter_vars),
            # loop depth, and which loops have data-dependent extents (CSR kernels)
            "loops": "".join("c" if isinstance(lp.extent, tirx.IntImm) else "d"
                             for lp in loops),
            "algorithm": str(ann[CONV_ALGORITHM_ATTR]) if CONV_ALGORITHM_ATTR in ann else None,
            "annotations": sorted(str(k) for k in ann if k != CONV_SPEC_ATTR),
            "reads": [(_type_of(r.source), len(r.region)) for r in block.reads],
            "writes": [(_type_of(w.source), len(w.region)) for w in block.writes],
            "body": _stmt_shape(block.body),
            "init": _stmt_shape(block.init),
        })
    return [params, blocks]


def structure_key(mod: tvm.IRModule) -> str:
    """Shape-free identity of a task: same value for the same fused structure (block names
    in order, each block's iter-var kinds and loop depth, the conv algorithm annotation,
    the dtypes and the operations of each block's value), different when any of that
    differs; shapes, strides, paddings and constants do not enter."""
    text = repr(_structure(mod))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- size ----------------------------------------------------------------------------------

def _loop_extents(mod: tvm.IRModule) -> list[int]:
    """The constant extents of every block's loops, in program order (1 for dynamic ones)."""
    sch = s_tir.Schedule(mod)
    return [int(sch.get(lp).extent.value) if isinstance(sch.get(lp).extent, tirx.IntImm)
            else 1 for rv in _blocks_in_order(sch) for lp in sch.get_loops(rv)]


def _flops(mod: tvm.IRModule) -> float | None:
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - no estimate: size by loop extents alone
        return None
    return flops if flops > 0 else None


def _log_ratio(a: float, b: float) -> float:
    return abs(math.log(max(a, 1.0) / max(b, 1.0)))


@dataclass(frozen=True)
class _Size:
    flops: float | None
    extents: tuple[int, ...]

    @staticmethod
    def of(mod: tvm.IRModule) -> _Size:
        return _Size(_flops(mod), tuple(_loop_extents(mod)))

    def distance(self, other: _Size) -> tuple[float, float]:
        """How far two workloads of one structure are apart: |log flops ratio|, then the
        sum of |log extent ratio| over corresponding loops (how much tiling must adapt)."""
        by_flops = (_log_ratio(self.flops, other.flops)
                    if self.flops is not None and other.flops is not None else 0.0)
        by_loops = sum(_log_ratio(a, b) for a, b in zip(self.extents, other.extents,
                                                        strict=False))
        # rounded: equal sizes compare equal whatever the float noise, then by key
        return round(by_flops, 9), round(by_loops, 9)


# --- decisions -----------------------------------------------------------------------------

def adapt_perfect_tile(factors: list[int], extent: int) -> list[int]:
    """A perfect tiling of `extent` made from one of another extent: each inner factor,
    innermost first, keeps its largest part that divides what is left of `extent` (its
    gcd with it); what remains goes outermost. Unchanged when it tiles `extent` already."""
    if math.prod(factors) == extent:
        return list(factors)
    out = [1] * len(factors)
    left = extent
    for i in range(len(factors) - 1, 0, -1):
        out[i] = math.gcd(int(factors[i]), left)
        left //= out[i]
    out[0] = left
    return out


def _int_list(decision: object) -> list[int]:
    return [int(x) for x in decision]


def _adapt(sch: s_tir.Schedule, keep_locations: bool, adapted: list[tuple[list, list]]):
    """A `decision_provider` for `Trace.apply_to_schedule`: it sees each instruction with
    its inputs already translated to `sch`'s random variables, so the loops it tiles are
    the new ones, with the new extents. `adapted` collects (old, new) tile decisions."""

    def provide(inst, inputs, attrs, decision):  # noqa: ANN001, ANN202 - TVM's callback
        if decision is None:
            return None
        kind = inst.kind.name
        if kind == "SamplePerfectTile":
            extent = sch.get(inputs[0]).extent
            if not isinstance(extent, tirx.IntImm):
                return decision
            old = _int_list(decision)
            new = adapt_perfect_tile(old, int(extent.value))
            if new != old:
                adapted.append((old, new))
            return new
        if kind == "SamplePartitionedTile":
            extent = sch.get(inputs[0]).extent
            if not isinstance(extent, tirx.IntImm):
                return decision
            old = _int_list(decision)
            new = adapt_perfect_tile(old, int(extent.value))
            partition_pos, innerpart_factor = int(attrs[1]), int(attrs[2])
            if math.prod(new[partition_pos:]) % innerpart_factor != 0:
                return None  # re-sampled from the schedule's seed
            if new != old:
                adapted.append((old, new))
            return new
        if kind == "SampleComputeLocation" and not keep_locations:
            return None
        return decision

    return provide


def replay(trace: s_tir.Trace, mod: tvm.IRModule, postprocs: list,
           ) -> tuple[s_tir.Schedule | None, list[tuple[list, list]], str]:
    """`trace` (a record of another workload of the same structure) replayed on `mod`
    without its postprocessing, decisions adapted, then `postprocs` applied: the
    schedule, the tile decisions adapted (old, new), and why it failed ("" if it did not)."""
    why = ""
    for keep_locations in (True, False):
        adapted: list[tuple[list, list]] = []
        sch = s_tir.Schedule(mod, seed=_SEED, error_render_level="fast")
        try:
            trace.apply_to_schedule(sch, remove_postproc=True,
                                    decision_provider=_adapt(sch, keep_locations, adapted))
        except Exception as err:  # noqa: BLE001 - any schedule error rejects the replay
            why = f"replay failed: {_first_line(err)}"
            continue
        sch.enter_postproc()
        for postproc in postprocs:
            try:
                ok = postproc.apply(sch)
            except Exception as err:  # noqa: BLE001
                ok, why = False, f"{_name(postproc)} raised {_first_line(err)}"
            if not ok:
                return None, adapted, why or f"postprocessor {_name(postproc)} rejected it"
        return sch, adapted, ""
    return None, [], why


def _name(postproc: object) -> str:
    return type(postproc).__name__


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"


# --- candidates ----------------------------------------------------------------------------

def _mean_us(record: ms.database.TuningRecord) -> float | None:
    if not record.run_secs:
        return None
    secs = [float(s) for s in record.run_secs]
    mean = sum(secs) / len(secs)
    return None if mean >= _FAILED_RUN_S else mean * 1e6


def _schedule_key(trace: s_tir.Trace, mod: tvm.IRModule) -> str | None:
    sch = s_tir.Schedule(mod)
    try:
        trace.apply_to_schedule(sch, remove_postproc=False)
    except Exception:  # noqa: BLE001 - not the minimal schedule, whatever it is
        return None
    return workload_key(sch.mod)


def transfer_candidates(db: TuningDatabase, task: Task, target: tvm.target.Target,
                        postprocs: list, limit: int = 4) -> list[TransferCandidate]:
    """Best records of *other* workloads in `db` whose `structure_key` equals the task's,
    replayed on the task: at most `limit`, nearest first (|log flops ratio|, then loop
    extents), at most one per source workload (its best record that transfers, the
    minimal schedule excluded). Replay drops the source's postprocessing, adapts its tile
    decisions to the task's extents and applies `postprocs` (initialised, e.g.
    `ctx.space_generator.postprocs` of the task's `ms.TuneContext`; may be empty); a
    candidate that fails is skipped (logged at debug level). The task's own workload is
    never its own source. Deterministic for a given database."""
    del target  # the postprocessors carry it; kept for the caller's symmetry
    if limit <= 0:
        return []
    own_key = workload_key(task.mod)
    key = structure_key(task.mod)
    sources: dict[str, tuple[tvm.IRModule, list[tuple[float, ms.database.TuningRecord]]]] = {}
    structures: dict[str, str] = {}
    for record in db.database.get_all_tuning_records():
        mod = record.workload.mod
        wkey = workload_key(mod)
        if wkey == own_key:
            continue
        if wkey not in structures:
            try:
                structures[wkey] = structure_key(mod)
            except Exception as err:  # noqa: BLE001 - a module we cannot read is no source
                log.debug("transfer: workload %s unreadable: %s", wkey, _first_line(err))
                structures[wkey] = ""
        if structures[wkey] != key:
            continue
        us = _mean_us(record)
        if us is None:
            continue
        sources.setdefault(wkey, (mod, []))[1].append((us, record))

    size = _Size.of(task.mod)
    ranked = sorted(sources, key=lambda k: (size.distance(_Size.of(sources[k][0])), k))
    out: list[TransferCandidate] = []
    for wkey in ranked:
        if len(out) >= limit:
            break
        mod, records = sources[wkey]
        entry = db.ledger.get(wkey)
        name = entry.task if entry is not None else wkey
        minimal_key = entry.minimal_key if entry is not None else None
        records.sort(key=lambda r: r[0])  # stable: ties in the database's own order
        tried = 0
        for us, record in records:
            if minimal_key is not None and _schedule_key(record.trace, mod) == minimal_key:
                continue  # the source's hand-written schedule, not a search result
            if tried >= _TRIES_PER_SOURCE:
                break
            tried += 1
            sch, adapted, why = replay(record.trace, task.mod, postprocs)
            if sch is None:
                log.debug("transfer %s -> %s: record of %.1f us skipped: %s",
                          name, task.name, us, why)
                continue
            log.debug("transfer %s -> %s: record of %.1f us, %d tile decision(s) adapted",
                      name, task.name, us, len(adapted))
            out.append(TransferCandidate(sch, name, wkey, us))
            break
    return out


def source_structures(db: TuningDatabase) -> dict[str, set[str]]:
    """`structure_key` -> the workload keys of the database holding it: which tasks can
    have transfer sources at all, known before building anything for them."""
    out: dict[str, set[str]] = {}
    seen: set[str] = set()
    for record in db.database.get_all_tuning_records():
        wkey = workload_key(record.workload.mod)
        if wkey in seen:
            continue
        seen.add(wkey)
        try:
            out.setdefault(structure_key(record.workload.mod), set()).add(wkey)
        except Exception as err:  # noqa: BLE001 - a module we cannot read is no source
            log.debug("transfer: workload %s unreadable: %s", wkey, _first_line(err))
    return out


def measure_transfers(db: TuningDatabase, tasks: list[tuple[Task, list]],
                      target: tvm.target.Target, builder: ms.builder.Builder,
                      runner_for: Callable[[Task], ms.runner.Runner], limit: int,
                      ) -> dict[str, int]:
    """Transfer-tuning's step before a search: every task's transfer candidates (`tasks`
    pairs a task with its initialised postprocessors) built in one builder call, run, and
    committed as tuning records of the task, where they compete with its minimal
    schedule and seed its evolutionary search (which starts from the database's best
    records of the workload). The ledger says which schedule came from which workload
    (`transferred`), and that the task's transfer is done (`transfer_done`), so it is
    measured once per workload. Returns, per task name, the candidates measured."""
    from dlas.tuning.metaschedule.minimal_candidate import commit_candidate, measure_candidates

    todo: list[tuple[Task, TransferCandidate]] = []
    for task, postprocs in tasks:
        if db.entry(task.mod, task.name).transfer_done:
            continue
        todo += [(task, c) for c in transfer_candidates(db, task, target, postprocs, limit)]
    counts = {task.name: 0 for task, _ in tasks}
    if todo:
        measured = measure_candidates([c.schedule for _, c in todo], target, builder,
                                      lambda i: runner_for(todo[i][0]))
        for (task, cand), (run_secs, error) in zip(todo, measured, strict=True):
            if run_secs is None:
                log.debug("transfer %s -> %s not measured: %s", cand.source_task, task.name,
                          error)
                continue
            commit_candidate(db, task, cand.schedule, target, run_secs)
            entry = db.entry(task.mod, task.name)
            entry.transferred[workload_key(cand.schedule.mod)] = cand.source_task
            counts[task.name] += 1
    for task, _ in tasks:
        db.entry(task.mod, task.name).transfer_done = True
    db.save()
    return counts
