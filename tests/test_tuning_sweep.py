"""MetaSchedule through the runner: a tuned point is recorded with its trials, a second run
re-tunes nothing, another sweep reuses the target's database, and pairs that cannot be
tuned are recorded as unsupported with the reason."""

from __future__ import annotations

from pathlib import Path

from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.sweep.config import parse_config
from dlas.sweep.grid import expand
from tests.conftest import tiny_sweep

TUNING = ("tuning:\n  - none\n  - name: metaschedule\n    params: {trials: 2, trials_per_task: 2,"
          " trials_per_iter: 2, population: 16, early_stopping: null, tasks: convs}")


def tuned_sweep(name: str, algorithms: list[str] | None = None,
                compression: list[str] | None = None) -> str:
    return tiny_sweep(name, compression=compression, algorithms=algorithms).replace(
        "tuning: [none]", TUNING)


def run(text: str, root: Path, cache: Path) -> RunReport:
    return Runner(Workspace(root, cache), progress=False).run(parse_config(text))


def rows(root: Path) -> dict[str, dict]:
    with ResultStore(root / "results.db") as store:
        return {r.tuning.split("(")[0]: r for r in store.rows()}


def test_tuned_point_recorded_then_reused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    report = run(tuned_sweep("tuned"), root, tmp_path / "cache")
    assert report.ok == 2, report.rows
    by_tuning = rows(root)
    tuned, untuned = by_tuning["metaschedule"], by_tuning["none"]
    assert tuned.status == "ok" and tuned.verified == 1
    assert tuned.tuning_trials > 0 and tuned.tasks_tuned > 0
    assert tuned.tasks_reused == 0 and tuned.tuning_s > 0
    assert {t["outcome"] for t in tuned.tuning_report["per_task"]} <= {"tuned", "untuned"}
    assert untuned.tuning_trials is None  # untuned points carry no tuning report

    again = run(tuned_sweep("tuned"), root, tmp_path / "cache")
    assert again.recomputed_nothing

    # another sweep (its own cache) compiling the same workloads for the same target
    other = run(tuned_sweep("other"), root, tmp_path / "other-cache")
    assert other.computed["compile"] == 2
    with ResultStore(root / "results.db") as store:
        reused = [r for r in store.rows(sweep="other") if r.tasks_reused]
    assert reused and reused[0].tuning_trials == 0
    # what the first point tuned, and what its session's scheduler chose not to tune
    booked = [t for t in tuned.tuning_report["per_task"]
              if t["outcome"] == "tuned" or t["ended_by"] == "scheduler"]
    assert reused[0].tasks_reused == len(booked) >= tuned.tasks_tuned


def test_untunable_pairs_are_recorded_as_unsupported() -> None:
    text = tuned_sweep("gpu", algorithms=["direct", "direct_csr"],
                       compression=["weight_pruning"]).replace(
        "targets: [host]", "targets: [host, cuda]")
    points = {(p.algorithms.name, p.tuning.name, p.targets.name): p
              for p in expand(parse_config(text))}
    # sparse code is tuned on a GPU in its own space: here, as dense, only the missing GPU
    # stops it (tuning measures on the target)
    for algorithm in ("direct_csr", "direct"):
        blocked = points[(algorithm, "metaschedule", "cuda")].blocked
        assert blocked and "no CUDA GPU" in blocked and "CSR" not in blocked
    assert points[("direct_csr", "metaschedule", "host")].blocked is None
    assert points[("direct_csr", "none", "cuda")].blocked is None  # compiles untuned
