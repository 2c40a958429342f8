"""The executor interface: one stage order derived from the stages, one per-point plan
that both executors walk, and the shared part of a run (which points run, blocked points,
fail-fast, interrupts) in one place. The Ray executor walking the same plans on a real
cluster is in tests/test_ray_executor.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from dlas.cli import main
from dlas.estimate.estimate import estimate_sweep
from dlas.results.store import ResultStore
from dlas.runner.executor_choice import make_executor
from dlas.runner.point_plan import PointPlan, plan_point
from dlas.runner.ray_executor import RayRunner
from dlas.runner.refused import ExecutorRefused
from dlas.runner.runner import Runner
from dlas.runner.sweep_executor import PlanExecutor, SweepExecutor, SweepRun
from dlas.runner.workspace import Workspace
from dlas.stages import ALL, BY_NAME, CHAINS, RESULT_STAGES, STAGES, Stage, stage_keys
from dlas.stages.graph import StageGraphError, chain_to, graph_order, leaves
from dlas.sweep.config import parse_config
from dlas.sweep.grid import expand
from tests.conftest import tiny_sweep


def _with_onnxruntime(text: str) -> str:
    """The sweep with an ONNX Runtime baseline point beside its TVM point."""
    return text.replace("tuning: [none]", "tuning: [none, onnxruntime]")


def _stage(name: str, parent: str | None) -> Stage[Any]:
    """A declared stage with only a name and a parent: what the graph is read from."""

    class Declared(Stage[None]):
        version: ClassVar[int] = 1

        def key_inputs(self, point: Any) -> dict[str, Any]:
            return {}

    Declared.name, Declared.parent = name, parent
    return Declared()


# -- the stage order, derived -----------------------------------------------------------


def test_the_stage_order_is_read_off_the_parents_in_any_given_order() -> None:
    assert STAGES == ("data", "train", "compress", "import", "compile", "measure",
                      "baseline")
    assert [s.name for s in graph_order(reversed(ALL))] == [
        "data", "train", "compress", "import", "baseline", "compile", "measure"]
    assert [s.name for s in RESULT_STAGES] == ["measure", "baseline"]
    assert [s.name for s in CHAINS["baseline"]] == ["data", "train", "compress", "import",
                                                    "baseline"]


def test_a_new_stage_takes_its_place_from_its_parent() -> None:
    profile = _stage("profile", "measure")
    order = graph_order((*ALL, profile))
    names = [s.name for s in order]
    assert names.index("measure") < names.index("profile") < names.index("baseline")
    assert [s.name for s in leaves(order)] == ["profile", "baseline"]
    assert [s.name for s in chain_to(profile, order)][-3:] == ["compile", "measure",
                                                              "profile"]


@pytest.mark.parametrize(("stages", "match"), [
    ([("a", None), ("b", "nowhere")], "names parent 'nowhere'"),
    ([("a", None), ("b", None)], "exactly one root"),
    ([("a", None), ("b", "c"), ("c", "b")], "cycle"),
])
def test_a_graph_that_is_not_a_tree_is_refused(stages: list[tuple[str, str | None]],
                                               match: str) -> None:
    with pytest.raises(StageGraphError, match=match):
        graph_order([_stage(n, p) for n, p in stages])


def test_keys_and_the_estimate_follow_the_same_chains(tmp_path: Path) -> None:
    config = parse_config(_with_onnxruntime(tiny_sweep()))
    for point in expand(config):
        chain = CHAINS["baseline" if point.is_baseline else "measure"]
        assert [s for s, _ in stage_keys(point).items()] == [s.name for s in chain]
    est = estimate_sweep(config, tmp_path / "cache", tmp_path / "results.db")
    stages = [t.stage for t in est.tasks]
    assert sorted(set(stages), key=STAGES.index) == [s for s in STAGES if s in stages]


# -- one plan per point -------------------------------------------------------------------


def _plans(text: str) -> list[PointPlan]:
    return [plan_point(i, p) for i, p in enumerate(expand(parse_config(text)), 1)
            if not p.blocked]


def test_a_point_plan_is_its_chain_with_the_timing_last() -> None:
    tvm, baseline = _plans(_with_onnxruntime(tiny_sweep()))
    assert [s.name for s in tvm.prepared] == ["train", "compress", "import", "compile"]
    assert tvm.timed is BY_NAME["measure"] and tvm.unmeasurable is None
    assert [s.name for s in tvm.stored][-1] == "measure"
    assert [s.name for s in baseline.prepared] == ["train", "compress", "import"]
    assert baseline.timed is BY_NAME["baseline"]
    assert tvm.group == baseline.group  # one model's variants are timed together
    assert tvm.keys == stage_keys(tvm.point)


def test_a_target_nothing_here_can_run_ends_at_its_compile() -> None:
    from tests.test_targets import OTHER_ARCH

    text = tiny_sweep().replace("targets: [host]", "targets:\n  - name: llvm\n"
                                f"    params: {{arch: {OTHER_ARCH}}}")
    (plan,) = _plans(text)
    assert plan.timed is None and plan.unmeasurable and OTHER_ARCH in plan.unmeasurable
    assert [s.name for s in plan.stored] == ["train", "compress", "import", "compile"]


# -- the protocol and the shared run ---------------------------------------------------


def test_both_executors_are_sweep_executors_and_share_the_run(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    for executor in (Runner(ws, progress=False), RayRunner(ws, progress=False),
                     make_executor("local", ws, progress=False)):
        assert isinstance(executor, SweepExecutor) and isinstance(executor, PlanExecutor)
        assert type(executor).run is PlanExecutor.run  # one prologue, one interrupt path
    assert isinstance(make_executor("local", ws), Runner)


@pytest.mark.parametrize(("kind", "address", "match"), [
    ("threads", None, "not an executor; choose one of local, ray"),
    ("local", "127.0.0.1:6379", "only with --executor ray"),
    ("ray", "127.0.0.1:1", "no Ray cluster answers there"),
])
def test_an_executor_that_cannot_run_says_what_to_do(tmp_path: Path, kind: str,
                                                     address: str | None, match: str) -> None:
    with pytest.raises(ExecutorRefused, match=match):
        make_executor(kind, Workspace(tmp_path), address=address)


class _Walked(PlanExecutor):
    """A walk that records its first plan's point as failed, then is interrupted: what
    the shared run does around any executor's walk."""

    def __init__(self, workspace: Workspace, interrupt: bool) -> None:
        super().__init__(workspace, progress=False)
        self.interrupt = interrupt
        self.walked: list[PointPlan] = []

    def walk(self, run: SweepRun, plans: list[PointPlan]) -> None:
        from dlas.runner.rows import failed_row, new_row

        self.walked = plans
        for plan in plans:
            self.record(run, plan, failed_row(new_row(plan.point, run.name), "train",
                                              "RuntimeError: boom", ""))
            if run.stopped:
                return
            if self.interrupt:
                raise KeyboardInterrupt


def test_the_shared_run_records_blocked_points_stops_and_is_interrupted(
        tmp_path: Path) -> None:
    # direct_csr on an unpruned model is blocked: recorded without a walk
    text = tiny_sweep(algorithms=["direct", "gemm", "direct_csr"])
    report = _Walked(Workspace(tmp_path / "a"), interrupt=True).run(parse_config(text))
    assert report.interrupted and report.not_runnable == 1 and report.failed == 1
    with ResultStore(tmp_path / "a" / "results.db") as store:
        statuses = sorted(r.status for r in store.rows())
    assert statuses == ["failed", "not_runnable"]

    walker = _Walked(Workspace(tmp_path / "b"), interrupt=False)
    report = walker.run(parse_config(text), fail_fast=True)
    assert not report.interrupted and report.failed == 1 and len(walker.walked) == 2

    # a failed point is skipped next time (its row still the sweep's); --retry-failed
    # walks only the failed ones, never the blocked one
    again = _Walked(Workspace(tmp_path / "b"), interrupt=False)
    report = again.run(parse_config(text))
    assert report.skipped_failed == 1 and [p.index for p in again.walked] == [2]
    assert len(report.rows) == 3
    retried = _Walked(Workspace(tmp_path / "b"), interrupt=False)
    retried.run(parse_config(text), retry_failed=True)
    assert [p.index for p in retried.walked] == [1, 2]


def test_reproduce_takes_the_executor_flags(tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    ws = ["--workspace", str(tmp_path / "ws"), "--no-progress"]
    assert main(["reproduce", "cifar10_cpu", *ws, "--ray-address", "127.0.0.1:1"]) == 2
    assert "only with --executor ray" in capsys.readouterr().out
    assert main(["reproduce", "cifar10_cpu", *ws, "--executor", "ray",
                 "--ray-address", "127.0.0.1:1"]) == 2
    assert "no Ray cluster answers there" in capsys.readouterr().out
    assert not (tmp_path / "ws" / "results.db").exists()  # refused before any work
