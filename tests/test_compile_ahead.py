"""Untuned compiles on a spare core (`dlas.runner.compile_ahead`): real helper processes
computing real compiles under the run's claims, the run timing every variant together."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dlas.results.store import ResultStore
from dlas.runner.compile_ahead import helper_count
from dlas.runner.machine import MachineLock
from dlas.runner.runner import Runner, Workspace
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep


def sweep_text() -> str:
    text = tiny_sweep("ahead", algorithms=["direct", "gemm", "spatial_pack"])
    text = text.replace("  - spatial_pack\n",
                        "  - spatial_pack\n  - {name: direct, params: {layout: NCHWc}}\n")
    return text.replace("tuning: [none]", "tuning: [none, onnxruntime]")  # and a baseline


def computed_by(cache: Path, stage: str) -> dict[str, int]:
    """Per entry of `stage`: the pid that computed it."""
    pids = {}
    for meta in (cache / stage).glob("*/meta.json"):
        data = json.loads(meta.read_text())
        pids[meta.parent.name] = int(data["computed_by"]["pid"])
    return pids


def test_helpers_compile_ahead_and_the_model_is_timed_in_one_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "1")
    workspace = Workspace(tmp_path, tmp_path / "cache")
    runner = Runner(workspace, progress=False, machine_lock=MachineLock(tmp_path / "locks"))
    report = runner.run(parse_config(sweep_text()))
    out = capsys.readouterr().out
    assert report.ok == 5, out
    # every compile computed once, some of them by the helper, all counted as computed
    assert report.computed["compile"] == 4 and report.reused["compile"] == 0
    pids = computed_by(tmp_path / "cache", "compile")
    assert len(pids) == 4
    helpers = {pid for pid in pids.values() if pid != os.getpid()}
    assert len(helpers) == 1, pids  # one helper, and it did some of the work
    assert "computed on a spare core" in out
    # no timing overlapped a helper's compile (the machine lock is exclusive for timings)
    spans = [json.loads(meta.read_text())["computed_by"]
             for meta in (tmp_path / "cache").glob("*/*/meta.json")]
    for timing in (s for s in spans if s["exclusive"]):
        start, end = timing["span"]
        assert not [s for s in spans if s["pid"] != timing["pid"]
                    and s["span"][0] < end and start < s["span"][1]], timing
    # the model's variants were still timed together, in one timing run
    with ResultStore(tmp_path / "results.db") as store:
        rows = store.rows()
        runs = {run.run_id for row in rows
                for run in store.timing_runs(row.point_key, row.timing_key)}
    assert len(rows) == 5 and len(runs) == 1
    assert all(row.max_abs_diff is not None and row.status == "ok" for row in rows)

    # a second run computes nothing and starts no helper
    again = Runner(workspace, progress=False,
                   machine_lock=MachineLock(tmp_path / "locks")).run(parse_config(sweep_text()))
    assert again.recomputed_nothing and again.reused["compile"] == 4


def test_a_helper_that_dies_leaves_its_compile_to_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper is killed as it is handed its first compile: the run computes it."""
    from dlas.runner import compile_ahead

    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "1")
    real_send = compile_ahead.CompileAhead._send

    def send_then_die(self, helper, items) -> None:  # noqa: ANN001
        helper.proc.kill()
        helper.proc.wait()
        real_send(self, helper, items)

    monkeypatch.setattr(compile_ahead.CompileAhead, "_send", send_then_die)
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    report = runner.run(parse_config(sweep_text()))
    assert report.ok == 5 and report.failed == 0
    assert set(computed_by(tmp_path / "cache", "compile").values()) == {os.getpid()}


def test_a_model_is_timed_before_the_next_one_trains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """Helpers do not change the order of a run: a model's variants are timed once its
    compiles are stored, before the next model trains (training never runs beside a
    helper)."""
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "1")
    text = tiny_sweep("two", algorithms=["direct", "gemm", "spatial_pack"]).replace(
        "  - name: tiny_cnn\n", "  - name: tiny_cnn\n  - name: tiny_cnn_twin\n")
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    report = runner.run(parse_config(text))
    out = capsys.readouterr().out
    assert report.ok == 6, out
    lines = out.splitlines()
    timed = [i for i, line in enumerate(lines) if "variant(s) of tiny_cnn" in line]
    trained = [i for i, line in enumerate(lines) if "train     computing" in line]
    assert len(timed) == 2 and len(trained) == 2, out
    assert trained[0] < timed[0] < trained[1] < timed[1], out
    assert "computed on a spare core" in out


@pytest.mark.parametrize("named", [True, False], ids=["holder-named", "holder-unwritten"])
def test_a_compile_a_helper_takes_under_the_run_holds_its_group_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture, named: bool) -> None:
    """A helper can claim a compile between the run's look at what helpers hold and its
    own claim (linked kernels make compiles that short). The run then comes back for
    that point as it does for one a helper holds, and times the model's variants
    together; it does not take the helper for another dlas process and time the group
    without it. Nor when the claim's holder has not written its name yet (it does right
    after locking): CI met that once (2026-11-30), and timed a model in two groups."""
    import socket
    import time as clock

    from dlas.runner.claims import Holder
    from dlas.runner.executor import EntryBusy, StageExecutor
    from dlas.stages.compile import COMPILE

    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "1")
    real = StageExecutor.facts
    raced: list[str] = []

    def facts(self, point, keys, stage):  # noqa: ANN001, ANN202
        if (stage is COMPILE and point.algorithms.name == "spatial_pack" and not raced
                and self.helper_pids):
            # the race as CI met it: the helper's GEMM compile is stored by then, so the
            # run's next look finds every other variant ready
            deadline = clock.monotonic() + 120
            while (len(list((self.cache.root / "compile").glob("*/meta.json"))) < 2
                   and clock.monotonic() < deadline):
                clock.sleep(0.05)
            raced.append(keys[COMPILE.name])
            helper = Holder(socket.gethostname(), next(iter(self.helper_pids)), clock.time())
            raise EntryBusy(COMPILE.name, keys[COMPILE.name], helper if named else None)
        return real(self, point, keys, stage)

    monkeypatch.setattr(StageExecutor, "facts", facts)
    text = tiny_sweep("race", algorithms=["direct", "gemm", "spatial_pack"])
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    report = runner.run(parse_config(text))
    out = capsys.readouterr().out
    assert raced and report.ok == 3, out
    timed = [line for line in out.splitlines() if "variant(s) of tiny_cnn" in line]
    assert len(timed) == 1 and "3 variant(s)" in timed[0], out


@pytest.mark.parametrize(("env", "cores", "expected"), [
    ("", 1, 0), ("", 2, 1), ("", 16, 4), ("0", 16, 0), ("3", 2, 3)])
def test_helper_count(env: str, cores: int, expected: int,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", env)
    assert helper_count(cores) == expected


def test_a_bad_helper_count_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "two")
    with pytest.raises(ValueError, match="DLAS_COMPILE_AHEAD='two'"):
        helper_count(2)


def test_dlas_run_refuses_a_bad_helper_count_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    from dlas.cli import main

    config = tmp_path / "sweep.yaml"
    config.write_text(sweep_text())
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "two")
    assert main(["run", str(config), "--workspace", str(tmp_path / "ws")]) == 2
    captured = capsys.readouterr()
    assert "DLAS_COMPILE_AHEAD='two'" in captured.out + captured.err
    assert not (tmp_path / "ws" / "cache").exists()  # nothing was computed


def test_a_tuned_point_is_never_a_helpers_compile_whatever_sets_its_trials() -> None:
    """The quickstart's tuned point gives its trials in the option's params and leaves
    `budgets.tuning_trials` at 0: it still searches (and times candidates), so it is
    exclusive work and never handed to a helper. (It once counted as untuned: on a
    16-core GPU machine a helper spent minutes tuning while the run waited for it.)"""
    from dlas import registry
    from dlas.runner.compile_ahead import compile_wanted
    from dlas.stages import stage_keys
    from dlas.stages.compile import COMPILE, tunes
    from dlas.sweep.config import load_config
    from dlas.sweep.grid import expand

    registry.load_plugins()
    root = Path(__file__).resolve().parents[1]
    config = load_config(root / "configs" / "quickstart.yaml")
    assert config.budgets.tuning_trials == 0
    points = [p for p in expand(config) if not p.blocked]
    tuned = [p for p in points if p.tuning.name == "metaschedule"]
    assert tuned
    for point in tuned:
        assert tunes(point)
        assert COMPILE.resources_for(point).exclusive
        assert not compile_wanted(_NoCache(), point, stage_keys(point))  # type: ignore[arg-type]
    untuned = [p for p in points if p.tuning.name == "none"]
    assert untuned and not any(tunes(p) for p in untuned)
    assert all(compile_wanted(_NoCache(), p, stage_keys(p))  # type: ignore[arg-type]
               for p in untuned)


class _NoCache:
    """A cache holding nothing: every compile is still to do."""

    def has(self, stage: str, key: str) -> bool:
        return False


@pytest.mark.parametrize("helpers", [1, 2])
def test_one_offer_lets_a_helper_take_every_free_compile_in_turn(tmp_path: Path,
                                                                 helpers: int) -> None:
    """A helper walks the list it is handed, so it never idles while compiles are due:
    with the executor busy elsewhere, one offer gets every due compile computed by the
    helpers, each once, except one the executor has claimed (left to it); two helpers
    share the list through the claims."""
    import io

    from rich.console import Console

    from dlas.runner.cache import Cache
    from dlas.runner.claims import Claims
    from dlas.runner.compile_ahead import CompileAhead
    from dlas.runner.console import RunConsole
    from dlas.runner.executor import StageExecutor
    from dlas.runner.workspace import StageTally
    from dlas.stages import stage_keys
    from dlas.stages.base import StageEnv
    from dlas.stages.compile import COMPILE
    from dlas.stages.import_model import IMPORT
    from dlas.sweep.grid import expand

    points = [p for p in expand(parse_config(sweep_text())) if not p.is_baseline]
    assert len(points) == 4
    keys = [stage_keys(p) for p in points]
    cache, locks = Cache(tmp_path / "cache"), tmp_path / "locks"
    console = RunConsole(progress=False, console=Console(file=io.StringIO()))
    claims = Claims(cache.root)
    executor = StageExecutor(cache, StageEnv(tmp_path, console, False), StageTally(),
                             claims=claims, machine=MachineLock(locks))
    executor.facts(points[0], keys[0], IMPORT)  # one model: its variants share the import
    mine = keys[1][COMPILE.name]
    ahead = CompileAhead(cache, tmp_path, locks, helpers)
    try:
        with claims.hold(COMPILE.name, mine):
            ahead.offer(list(zip(points, keys, strict=True)))
            ahead.drain()
    finally:
        ahead.close()
    pids = computed_by(tmp_path / "cache", "compile")
    assert set(pids) == {k[COMPILE.name] for k in keys} - {mine}
    assert os.getpid() not in pids.values() and 1 <= len(set(pids.values())) <= helpers


class _Ahead:
    """Helpers that are busy, holding the compiles in `held`; `drained` once waited for."""

    def __init__(self, held: set[str]) -> None:
        self.held, self.drained = held, False

    def holds(self, key: str) -> bool:
        return key in self.held

    def busy(self) -> bool:
        return not self.drained

    def drain(self) -> None:
        self.drained = True


@pytest.mark.parametrize("later", ["free", "held", "stored"])
def test_heavy_work_waits_for_helpers_while_this_process_compiles_a_free_variant(
        tmp_path: Path, later: str) -> None:
    """Before heavy work (here a tuned point, which times candidates), the run waits for
    busy helpers; while a later variant's compile is free (due, held by no helper), it
    leaves the heavy point for later and compiles that one itself instead of idling (the
    quickstart's tuned point waited 4.5 s with a core idle). With nothing free it waits,
    as before."""
    from types import SimpleNamespace

    from dlas import registry
    from dlas.runner.runner import GO, RESTART, SKIP
    from dlas.stages import stage_keys
    from dlas.stages.compile import COMPILE, tunes
    from dlas.sweep.grid import expand

    registry.load_plugins()
    text = tiny_sweep("heavy", algorithms=["direct", "gemm"]).replace(
        "tuning: [none]", "tuning: [none, {name: metaschedule, params: {trials: 8}}]")
    points = [p for p in expand(parse_config(text)) if not p.blocked]
    states = [SimpleNamespace(plan=SimpleNamespace(point=p, keys=stage_keys(p)),
                              prepared=False, busy=None) for p in points]
    order = [(s.plan.point.algorithms.name, tunes(s.plan.point)) for s in states]
    assert order == [("direct", False), ("direct", True), ("gemm", False), ("gemm", True)]
    tuned, free = states[1], states[2]
    free_key = free.plan.keys[COMPILE.name]
    stored = {(stage, key) for s in states for stage, key in s.plan.keys.items()
              if stage != COMPILE.name}  # every model stored up to its import
    if later == "stored":
        stored.add((COMPILE.name, free_key))
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    runner.cache = SimpleNamespace(has=lambda stage, key: (stage, key) in stored)
    ahead = _Ahead({free_key} if later == "held" else set())
    runner._ahead = ahead  # type: ignore[assignment]
    step = runner._hand_over(tuned, False, states)  # type: ignore[arg-type]
    if later == "free":
        assert step == SKIP and not ahead.drained
        assert runner._hand_over(free, True, states) == GO  # type: ignore[arg-type]
        stored.add((COMPILE.name, free_key))  # this process compiled it: nothing free now
        step = runner._hand_over(tuned, False, states)  # type: ignore[arg-type]
        assert step == RESTART and ahead.drained
    else:
        assert step == RESTART and ahead.drained
    assert runner._hand_over(tuned, False, states) == GO  # type: ignore[arg-type]
