"""A sweep's expected wall time, per stage and in total, on 1 and on N workers.

For each point the runner would compute, every stage entry not already cached gets a
cost: rescaled from the most similar entry this workspace measured (same stage, same
options on the layers that matter to it; see `costmodel.SIGNATURE`), else the built-in
cost model. Entries shared by points (one trained model feeds every compression) are
counted once, cached entries cost nothing, and the deduplicated stage graph is list-
scheduled on N workers (`schedule.simulate`).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from dlas.estimate.costmodel import SIGNATURE, components, helper_factor, pass_weights
from dlas.estimate.measured import Measured, WorkspaceRecord, load_workspace
from dlas.estimate.schedule import CostedStage, ScheduleResult, simulate
from dlas.estimate.work import StageWork, parent_of, shared_kernels, stage_work
from dlas.stages import STAGES, TIMED_STAGES
from dlas.sweep.config import SweepConfig


@dataclass(frozen=True)
class StageCost:
    """One stage entry to compute and its estimated seconds."""

    stage: str
    key: str
    seconds: float
    #: The parts of `seconds` rescaled from this workspace's measurements, and from the
    #: built-in cost model.
    measured_s: float
    builtin_s: float
    #: How the number was obtained, for a reader checking it.
    basis: str
    #: Indices (into `Estimate.tasks`) of the entries it must wait for.
    deps: tuple[int, ...]
    #: The point it was first needed by, as `dlas plan` lists it.
    point: str


@dataclass(frozen=True)
class StageSummary:
    stage: str
    compute: int
    cached: int
    seconds: float
    measured_s: float


@dataclass(frozen=True)
class Estimate:
    sweep: str
    points: int
    #: Points a run would execute (not blocked; failed ones are skipped until
    #: --retry-failed).
    runnable: int
    skipped_failed: int
    stages: tuple[StageSummary, ...]
    tasks: tuple[StageCost, ...]
    #: Wall time on 1 worker (this machine, as `dlas run` runs) and on N.
    serial: ScheduleResult
    parallel: ScheduleResult
    #: Measured cache entries this workspace offered.
    samples: int
    #: The built-in training cost's per-MAC stretch for this machine (1.0: as fitted).
    mac_scale: float = 1.0
    #: The stretch of the rest of the built-in cost (serial work) for this machine.
    serial_scale: float = 1.0
    #: How many times faster a training step runs here in bfloat16 (1.0: none, or no
    #: bfloat16 fit in the sweep).
    bf16_speedup: float = 1.0

    @property
    def total_s(self) -> float:
        return self.serial.serial_s

    @property
    def measured_s(self) -> float:
        return sum(t.measured_s for t in self.tasks)

    @property
    def builtin_s(self) -> float:
        return sum(t.builtin_s for t in self.tasks)


def _level(target: StageWork, sample: StageWork, layers: tuple[str, ...]) -> int:
    """How many of `layers`, in order, the two entries share an option on."""
    level = 0
    for layer in layers:
        if target.options.get(layer) != sample.options.get(layer):
            break
        level += 1
    return level



def _fit_speed(work: StageWork, bf16_speedup: float) -> float:
    """How many times faster than float32 the entry's fits run here: a measured bfloat16
    fit says what a float32 one would cost only once multiplied back."""
    return bf16_speedup if work.fit_precision == "bfloat16" else 1.0


def cost_of(work: StageWork, measured: list[Measured], mac_scale: float = 1.0,
            serial_scale: float = 1.0, bf16_speedup: float = 1.0
            ) -> tuple[float, float, str]:
    """(measured-based seconds, built-in seconds, basis) of one entry: per component,
    the median of the most similar measured entries rescaled by the built-in model's
    ratio, or the built-in model where none is similar (its training MACs stretched by
    `mac_scale` and the rest by `serial_scale`, this machine's speed, and a bfloat16 fit
    shortened by `bf16_speedup`: `dlas.estimate.machine_speed`)."""
    from_measured = from_model = 0.0
    notes: list[str] = []
    here = components(work, mac_scale, serial_scale, bf16_speedup)
    for part, target_s in components(work).items():
        if target_s <= 0:
            continue
        layers = SIGNATURE[part]
        best, scaled = 0, []
        for sample in measured:
            base = sample.builtin.get(part, 0.0)
            if base <= 0 or part not in sample.seconds:
                continue
            if part == "tuning" and sample.work.trials <= 0:
                continue  # all of its tasks came from the database: no per-trial cost
            level = _level(work, sample.work, layers)
            if level < 1 or level < best:
                continue
            if level > best:
                best, scaled = level, []
            scaled.append(sample.seconds[part] * target_s / base
                          * _fit_speed(sample.work, bf16_speedup)
                          / _fit_speed(work, bf16_speedup))
        if scaled:
            value = statistics.median(scaled)
            from_measured += value
            notes.append(f"{part}: measured x{value / target_s:.2f} of built-in "
                         f"({len(scaled)} entr{'y' if len(scaled) == 1 else 'ies'} with the "
                         f"same {', '.join(layers[:best])})")
        else:
            from_model += here[part]
            notes.append(f"{part}: built-in")
    return from_measured, from_model, "; ".join(notes) or "nothing to do"


def estimate_sweep(config: SweepConfig, cache_root: Path, db_path: Path,
                   workers: int = 1, record: WorkspaceRecord | None = None,
                   mac_scale: float = 1.0, serial_scale: float = 1.0,
                   bf16_speedup: float = 1.0, helpers: int = 0) -> Estimate:
    """The estimate of running `config` against the workspace (its cache and results);
    `mac_scale`, `serial_scale` and `bf16_speedup` correct the built-in cost for this
    machine (1.0: as fitted); `helpers`: the compile helpers a local run starts
    (`dlas.runner.compile_ahead`), which take part of the untuned compiles off its wall
    clock (their entries' seconds are then wall seconds, not compute)."""
    from dlas.runner.cache import Cache, CacheIndex
    from dlas.stages import KeyMemo, stage_keys
    from dlas.sweep.grid import expand
    from dlas.targets.resolve import resolve_target

    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    # a large grid's points share most stage keys: each computed, and looked up, once
    cache, memo = CacheIndex(Cache(cache_root)), KeyMemo()
    record = record or load_workspace(Path(cache_root), Path(db_path))
    by_stage: defaultdict[str, list[Measured]] = defaultdict(list)
    for sample in record.measured:
        by_stage[sample.work.stage].append(sample)

    points = expand(config)
    index: dict[tuple[str, str], int] = {}
    tasks: list[StageCost] = []
    cached: set[tuple[str, str]] = set()
    runnable = skipped = 0
    passes = config.budgets.timing_passes  # each pass times every point again
    kernels_built: set[str] = set()  # `shared_kernels` of compiles met so far
    for point in points:
        if point.blocked:
            continue
        if point.key in record.failed_points:
            skipped += 1
            continue
        runnable += 1
        keys = dict(stage_keys(point, memo).items())
        if "measure" in keys and resolve_target(point).unmeasurable:
            del keys["measure"]  # compiled, then recorded as not runnable here
        todo = {s for s, k in keys.items() if s != "data" and not cache.has(s, k)}
        cached.update((s, k) for s, k in keys.items() if s != "data" and s not in todo)
        if todo:
            todo.add("data")  # every run that computes anything loads the dataset
        shared = shared_kernels(point) if "compile" in keys else None
        kernels_reused = shared in kernels_built
        if shared is not None:
            kernels_built.add(shared)
        for stage in STAGES:
            if stage not in todo or (stage, keys[stage]) in index:
                continue
            parent = parent_of(stage)
            while parent is not None and parent not in todo:
                parent = parent_of(parent)
            deps = (index[(parent, keys[parent])],) if parent else ()
            work = stage_work(point, stage, keys[stage])
            if stage == "compile" and kernels_reused:
                work = replace(work, kernels_reused=True)
            m_s, b_s, basis = cost_of(work, by_stage[stage], mac_scale,
                                       serial_scale, bf16_speedup)
            if stage == "compile" and helpers and work.trials == 0:
                factor = helper_factor(helpers)
                m_s, b_s = m_s * factor, b_s * factor
                basis = f"{basis}; x{factor:.2f} beside {helpers} compile helper(s)"
            if stage in TIMED_STAGES and passes > 1:
                # built in: later passes re-check one input and time, a share of the
                # first; a measured entry is whichever pass stored it, so it counts whole
                times = sum(pass_weights(passes))
                m_s, b_s = m_s * passes, b_s * times
                basis = f"{basis}; {passes} passes (built in x{times:g})"
            index[(stage, keys[stage])] = len(tasks)
            tasks.append(StageCost(stage=stage, key=keys[stage], seconds=m_s + b_s,
                                   measured_s=m_s, builtin_s=b_s, basis=basis, deps=deps,
                                   point=point.describe()))

    computed = Counter(t.stage for t in tasks)
    stored = Counter(stage for stage, _ in cached)
    seconds: defaultdict[str, float] = defaultdict(float)
    measured_s: defaultdict[str, float] = defaultdict(float)
    for t in tasks:
        seconds[t.stage] += t.seconds
        measured_s[t.stage] += t.measured_s
    summaries = tuple(StageSummary(s, computed[s], stored[s], seconds[s], measured_s[s])
                      for s in STAGES if computed[s] or stored[s])
    graph = [CostedStage(f"{t.stage} {t.key}", t.seconds, t.deps) for t in tasks]
    return Estimate(sweep=config.name, points=len(points), runnable=runnable,
                    skipped_failed=skipped, stages=summaries, tasks=tuple(tasks),
                    serial=simulate(graph, 1), parallel=simulate(graph, workers),
                    samples=len(record.measured), mac_scale=mac_scale,
                    serial_scale=serial_scale, bf16_speedup=bf16_speedup)
