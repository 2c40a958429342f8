"""What a point's tuning report says a task got: a task whose only non-minimal schedules
are transferred ones (no search trials) is `transferred`, never `untuned` or `reused`,
whether its transfer ran at this point or an earlier one, and the report says which
schedule applies.

The hook runs for real on a real database; only what costs builds and runs is stubbed:
task extraction gives three elementwise kernels of one structure (so each can be
another's transfer source), the transfer step commits a replayed schedule as
`measure_transfers` would, and the search session reports the tasks it reached.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import tvm
from tvm import s_tir, te
from tvm.s_tir import meta_schedule as ms

from dlas.compiler.build import make_target
from dlas.profile.kernels import schedule_sources
from dlas.targets.base import TargetSpec
from dlas.targets.host import host_target
from dlas.tuning.metaschedule import tune
from dlas.tuning.metaschedule.database import TuningDatabase, workload_key
from dlas.tuning.metaschedule.measure import Timeouts
from dlas.tuning.metaschedule.report import TaskReport
from dlas.tuning.metaschedule.tasks import Task
from dlas.tuning.metaschedule.tune import MetaScheduleHook, TuningSettings

SOURCE, TARGET, BIG = "add7", "add5", "add64"


@functools.cache
def _target() -> tvm.target.Target:
    return make_target(host_target(2))


def _task(rows: int) -> Task:
    a = te.placeholder((rows, 16), "float32", name="a")
    b = te.compute((rows, 16), lambda i, j: a[i, j] + 1.0, name="b")
    return Task(name=f"add{rows}", mod=tvm.IRModule({"main": te.create_prim_func([a, b])}),
                weight=1)


def _schedule(task: Task, vectorize: bool = False) -> s_tir.Schedule:
    sch = s_tir.Schedule(task.mod)
    outer, inner = sch.get_loops(sch.get_sblock("b"))
    sch.parallel(outer)
    if vectorize:
        sch.vectorize(inner)
    return sch


def _commit(db: TuningDatabase, task: Task, sch: s_tir.Schedule, seconds: float) -> None:
    workload = db.database.commit_workload(task.mod)
    db.database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, run_secs=[seconds], target=_target(),
        args_info=ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))


def _seed_source(db_dir: Path) -> None:
    """A database holding one searched workload (the transfer source)."""
    db = TuningDatabase(db_dir)
    source = _task(7)
    _commit(db, source, _schedule(source, vectorize=True), 2e-6)
    entry = db.entry(source.mod, source.name)
    entry.trials = entry.requested = 1
    entry.complete, entry.ended_by = True, "budget"
    db.save()


def _hook(db_dir: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], *, trials: int,
          transfer: str = "on") -> MetaScheduleHook:
    """The compile hook with the point's tasks, transfers and search stubbed."""
    tasks = [_task(64), _task(5)]
    monkeypatch.setattr(tune, "extract", lambda mod, target: list(tasks))
    settings = TuningSettings(
        trials=trials, trials_per_task=trials, early_stopping=None, trials_per_iter=trials,
        timeouts=Timeouts(builder_s=60, runner_s=60), cost_model="random", population=8,
        seed=0, builder_workers=1, transfer=transfer,
        # the first-round plan (largest first): which task a budget of 1 reaches is known
        # without measuring (minimal schedules are not measured here)
        allocation="flops")
    spec = TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    hook = MetaScheduleHook(settings, spec, db_dir, say=lines.append)

    def minimals(db, tasks, target):  # noqa: ANN001, ANN202 - nothing measured
        return {t.name: (None, "") for t in tasks}

    def transfer(db, todo, target):  # noqa: ANN001, ANN202 - as `measure_transfers` does
        for job in todo:
            sch = _schedule(job.task)
            _commit(db, job.task, sch, 1e-6)
            entry = db.entry(job.task.mod, job.task.name)
            entry.transferred[workload_key(sch.mod)] = SOURCE
            entry.transfer_done = True
        db.save()
        return {job.task.name: 1 for job in todo}

    def session(db, plan, n_tasks, target):  # noqa: ANN001, ANN202 - the search, reported
        return [TaskReport(job.task.name, job.kind, "tuned", trials=plan.budget)
                for job in plan.reached]

    monkeypatch.setattr(hook, "_minimals", minimals)
    monkeypatch.setattr(hook, "_transfer", transfer)
    monkeypatch.setattr(hook, "_tune_session", session)
    return hook


def _run(db_dir: Path, monkeypatch: pytest.MonkeyPatch, **settings) -> tuple[TaskReport, str]:
    lines: list[str] = []
    hook = _hook(db_dir, monkeypatch, lines, **settings)
    hook(tvm.IRModule({}), _target())
    (report,) = [t for t in hook.report.tasks if t.task == TARGET]
    assert any(t.task == BIG for t in hook.report.tasks)
    return report, lines[-1]


def test_budget_spent_before_a_transferred_task_is_reached(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The point's one batch goes to the largest task; the smaller one, which got a
    transferred schedule first, gets no trials: it runs the transferred schedule, and
    the report, the summary line and the kernel profile say so."""
    db_dir = tmp_path / "db"
    _seed_source(db_dir)
    report, line = _run(db_dir, monkeypatch, trials=1)
    assert report.outcome == "transferred", report
    assert report.trials == 0 and report.ended_by == "scheduler"
    assert report.transfer_candidates == 1
    assert report.source == f"transferred from {SOURCE}", report
    assert "1 transferred" in line, line
    tuning = {"per_task": [{"task": report.task, "outcome": report.outcome,
                            "source": report.source}]}
    assert schedule_sources(tvm.IRModule({}), tuning) == {TARGET: "transferred"}

    # the same point again: nothing to do, and the task is still what it was
    again, line = _run(db_dir, monkeypatch, trials=1)
    assert again.outcome == "transferred", again
    assert again.transfer_candidates == 0 and again.source == f"transferred from {SOURCE}"
    assert "1 transferred" in line, line

    # a larger budget still spent elsewhere: the transfer is not measured again (it is
    # done), and the schedule it left is still the one that applies
    larger, _ = _run(db_dir, monkeypatch, trials=2)
    assert larger.outcome == "transferred", larger
    assert larger.transfer_candidates == 0 and larger.source == f"transferred from {SOURCE}"


def test_a_task_without_transfer_or_trials_stays_untuned(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """No source in the database: nothing transferred, no trials: untuned, as before."""
    report, line = _run(tmp_path / "db", monkeypatch, trials=1)
    assert report.outcome == "untuned" and report.source == "", report
    assert "transferred" not in line


def test_transfer_only_point_run_again_names_the_transferred_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`transfer: only` run twice: the second point measures nothing (no minimal time
    either) and still says the transferred schedule applies."""
    db_dir = tmp_path / "db"
    _seed_source(db_dir)
    first, _ = _run(db_dir, monkeypatch, trials=1, transfer="only")
    assert first.outcome == "transferred" and first.transfer_candidates == 1
    again, _ = _run(db_dir, monkeypatch, trials=1, transfer="only")
    assert again.outcome == "transferred" and again.transfer_candidates == 0
    assert again.source == f"transferred from {SOURCE}", again
