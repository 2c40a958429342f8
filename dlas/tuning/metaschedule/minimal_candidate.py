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
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import tvm
from tvm import s_tir
from tvm.s_tir import meta_schedule as ms

from dlas.compiler.minimal_schedule import ConvScheduler, schedule_blocks
from dlas.tuning.metaschedule.database import TuningDatabase
from dlas.tuning.metaschedule.tasks import Task

log = logging.getLogger(__name__)


def minimal_schedule(task: Task, schedulers: Mapping[str, ConvScheduler],
                     target: tvm.target.Target, vector_bits: int) -> s_tir.Schedule:
    """The task's untuned schedule, traced so the database can replay it."""
    sch = s_tir.Schedule(task.mod)
    with target:
        schedule_blocks(sch, dict(schedulers), vector_bits)
    return sch


def measure_candidate(sch: s_tir.Schedule, target: tvm.target.Target,
                      builder: ms.builder.Builder, runner: ms.runner.Runner,
                      ) -> tuple[list[float] | None, str]:
    """Build and run one scheduled module as MetaSchedule measures its candidates:
    (run seconds, "") or (None, why it failed)."""
    func = sch.mod["main"]
    (built,) = builder.build([ms.builder.BuilderInput(sch.mod, target)])
    if built.error_msg:
        return None, f"build failed: {str(built.error_msg).strip().splitlines()[-1]}"
    args_info = ms.arg_info.ArgInfo.from_prim_func(func)
    device = "cuda" if target.kind.name == "cuda" else "cpu"
    try:
        (future,) = runner.run([ms.runner.RunnerInput(built.artifact_path, device, args_info)])
        result = future.result()
    finally:
        builder_cleanup(built.artifact_path)
    if result.error_msg:
        return None, f"run failed: {str(result.error_msg).strip().splitlines()[-1]}"
    return [float(s) for s in result.run_secs], ""


def builder_cleanup(path: str | None) -> None:
    """Remove a built candidate's folder (as MetaSchedule's RemoveBuildArtifact does)."""
    if path:
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def record_minimal(db: TuningDatabase, task: Task, sch: s_tir.Schedule,
                   target: tvm.target.Target, run_secs: list[float]) -> float:
    """Store the minimal schedule's measurement as a tuning record; its mean in us."""
    workload = db.database.commit_workload(task.mod)
    args_info = ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"])
    db.database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, run_secs=run_secs, target=target, args_info=args_info))
    us = float(np.mean(run_secs)) * 1e6
    entry = db.entry(task.mod, task.name)
    entry.minimal_us = us
    db.save()
    return us


def ensure_minimal(db: TuningDatabase, task: Task, schedulers: Mapping[str, ConvScheduler],
                   target: tvm.target.Target, vector_bits: int,
                   builder: ms.builder.Builder, runner: ms.runner.Runner) -> tuple[float | None,
                                                                                   str]:
    """The task's minimal schedule measured and in the database (once per workload and
    target): its mean time in us, or None and why it could not be measured."""
    entry = db.entry(task.mod, task.name)
    if entry.minimal_us is not None:
        return entry.minimal_us, ""
    try:
        sch = minimal_schedule(task, schedulers, target, vector_bits)
    except Exception as exc:  # noqa: BLE001 - no minimal candidate: the search decides alone
        log.debug("minimal schedule of %s failed: %s", task.name, exc)
        return None, f"minimal schedule failed: {type(exc).__name__}: {exc}"
    run_secs, error = measure_candidate(sch, target, builder, runner)
    if run_secs is None:
        return None, f"minimal schedule not measured ({error})"
    return record_minimal(db, task, sch, target, run_secs), ""
