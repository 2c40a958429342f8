"""The algorithm's own minimal schedule as one more tuning candidate.

A small trial budget can lose to the hand-written minimal schedule: MetaSchedule's first
samples are random points of a large space, and the quickstart's 16-trial ResNet18 point
once came out at 7.86 ms tuned against 6.24 ms untuned. So before searching, each task's
minimal schedule (what the point would run untuned: `schedule_blocks` with the
algorithm's conv schedulers) is built and timed by the same builder and runner as every
candidate, and stored in the target's database as a tuning record with its trace. The
database's best record is what `MetaScheduleApplyDatabase` applies, so the schedule a
tuned point runs is never slower than its untuned one beyond measurement noise, and the
report says which of the two it was.

A point's minimal schedules are built in one builder call and run by one runner per kind
of arguments: MetaSchedule's local builder starts its worker processes for each call
(and once more to check itself when made), which cost more than the build of one small
kernel on a loaded 2-core machine (74 s for one candidate measured alone, under load).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from dlas.compiler.gpu_schedule import GpuScheduler
from dlas.compiler.minimal_schedule import ConvScheduler, schedule_blocks
from dlas.tuning.metaschedule.database import TuningDatabase, workload_key
from dlas.tuning.metaschedule.tasks import Task

log = logging.getLogger(__name__)


def minimal_schedule(task: Task, schedulers: Mapping[str, ConvScheduler],
                     target: tvm.target.Target, vector_bits: int,
                     gpu_rules: Mapping[str, GpuScheduler] | None = None) -> s_tir.Schedule:
    """The task's untuned schedule, traced so the database can replay it: on a GPU what an
    untuned point runs (`gpu_schedule`: the algorithm's GPU schedule from `gpu_rules`,
    else the thread binding), on a CPU the algorithm's own."""
    if target.kind.name == "cuda":
        from dlas.compiler.gpu_schedule import schedule_gpu_func

        with target:
            return schedule_gpu_func(task.mod["main"], target, gpu_rules)
    sch = s_tir.Schedule(task.mod)
    with target:
        schedule_blocks(sch, dict(schedulers), vector_bits)
    return sch


def measure_candidates(schedules: list[s_tir.Schedule], target: tvm.target.Target,
                       builder: ms.builder.Builder,
                       runner_for: Callable[[int], ms.runner.Runner], runs: int = 2,
                       ) -> list[tuple[list[float] | None, str]]:
    """Build and run scheduled modules as MetaSchedule measures its candidates, all builds
    in one builder call (its worker processes start once, not per candidate): per module
    (run seconds, "") or (None, why it failed). `runner_for(i)` is the runner for module
    `i` (modules whose arguments are alike share one, so its workers start once too).
    Each module is run `runs` times and the fastest run kept: on 2 cores a 2-thread kernel
    whose second thread is preempted once reads many times slower, and the minimal
    schedule is measured only once per workload, so one unlucky run would stand."""
    built = builder.build([ms.builder.BuilderInput(sch.mod, target) for sch in schedules])
    device = "cuda" if target.kind.name == "cuda" else "cpu"
    results: list[tuple[list[float] | None, str]] = []
    try:
        for i, (sch, one) in enumerate(zip(schedules, built, strict=True)):
            if one.error_msg:
                results.append((None, f"build failed: {_last_line(one.error_msg)}"))
                continue
            args_info = ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])
            futures = runner_for(i).run(
                [ms.runner.RunnerInput(one.artifact_path, device, args_info)] * runs)
            done = [f.result() for f in futures]
            good = [[float(t) for t in r.run_secs] for r in done if not r.error_msg]
            if not good:
                results.append((None, f"run failed: {_last_line(done[0].error_msg)}"))
            else:  # the least disturbed run: interference only ever slows a run down
                results.append((min(good, key=lambda secs: float(np.mean(secs))), ""))
    finally:
        for one in built:
            builder_cleanup(one.artifact_path)
    return results


def _last_line(message: object) -> str:
    lines = str(message).strip().splitlines()
    return lines[-1] if lines else ""


def builder_cleanup(path: str | None) -> None:
    """Remove a built candidate's folder (as MetaSchedule's RemoveBuildArtifact does)."""
    if path:
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def commit_candidate(db: TuningDatabase, task: Task, sch: s_tir.Schedule,
                     target: tvm.target.Target, run_secs: list[float]) -> float:
    """Store a measured schedule of the task as a tuning record (with its trace, so
    `MetaScheduleApplyDatabase` can replay it); its mean in us."""
    workload = db.database.commit_workload(task.mod)
    args_info = ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])
    db.database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, run_secs=run_secs, target=target, args_info=args_info))
    return float(np.mean(run_secs)) * 1e6


def record_minimal(db: TuningDatabase, task: Task, sch: s_tir.Schedule,
                   target: tvm.target.Target, run_secs: list[float]) -> float:
    """Store the minimal schedule's measurement as a tuning record; its mean in us."""
    us = commit_candidate(db, task, sch, target, run_secs)
    entry = db.entry(task.mod, task.name)
    entry.minimal_us, entry.minimal_key = us, workload_key(sch.mod)
    db.save()
    return us


def ensure_minimals(db: TuningDatabase, tasks: list[Task],
                    schedulers: Callable[[Task], Mapping[str, ConvScheduler]],
                    target: tvm.target.Target, vector_bits: int,
                    builder: ms.builder.Builder,
                    runner_for: Callable[[Task], ms.runner.Runner],
                    gpu_rules: Callable[[Task], Mapping[str, GpuScheduler] | None] | None = None,
                    ) -> dict[str, tuple[float | None, str]]:
    """Each task's minimal schedule measured and in the database (once per workload and
    target), by task name: its mean time in us, or None and why it could not be measured.
    Tasks whose minimal schedule is already recorded cost nothing. `gpu_rules`: each
    task's algorithms' GPU schedules (None: thread bindings)."""
    out: dict[str, tuple[float | None, str]] = {}
    todo: list[tuple[Task, s_tir.Schedule]] = []
    for task in tasks:
        known = db.entry(task.mod, task.name).minimal_us
        if known is not None:
            out[task.name] = (known, "")
            continue
        try:
            rules = gpu_rules(task) if gpu_rules is not None else None
            todo.append((task, minimal_schedule(task, schedulers(task), target, vector_bits,
                                                rules)))
        except Exception as exc:  # noqa: BLE001 - no minimal candidate: the search decides
            log.debug("minimal schedule of %s failed: %s", task.name, exc)
            out[task.name] = (None, f"minimal schedule failed: {type(exc).__name__}: {exc}")
    if not todo:
        return out
    measured = measure_candidates([sch for _, sch in todo], target, builder,
                                  lambda i: runner_for(todo[i][0]))
    for (task, sch), (run_secs, error) in zip(todo, measured, strict=True):
        if run_secs is None:
            out[task.name] = (None, f"minimal schedule not measured ({error})")
        else:
            out[task.name] = (record_minimal(db, task, sch, target, run_secs), "")
    return out
