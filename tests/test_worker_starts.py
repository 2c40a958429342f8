"""Timing workers started in pairs, a spare importing beside the worker a group needs
(`dlas.runner.worker_starts`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlas.runner import worker_starts
from dlas.runner.machine import MachineLock
from dlas.runner.runner import Runner, Workspace
from dlas.runner.worker_starts import (
    WorkerStarts,
    await_ready,
    release,
    spare_count,
    start_worker,
    worker_env,
)
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep


def test_a_waiting_worker_imports_says_so_and_ends_at_the_end_of_its_input() -> None:
    proc = start_worker(sys.executable, worker_env(1))
    assert await_ready(proc)
    assert proc.poll() is None  # it waits for its request
    release(proc)
    assert proc.returncode == 0


def test_a_spare_serves_the_next_group_once_and_only_with_its_own_settings() -> None:
    """A fresh start brings a spare that has imported by the time the worker is handed
    over; the next group gets that spare and nothing new starts; a spare started for
    other settings (another thread count) is let go and a fresh worker started."""
    starts = WorkerStarts(spares=1)
    started: list[subprocess.Popen[str]] = []
    real = worker_starts.start_worker

    def counted(python: str, env: dict[str, str]) -> subprocess.Popen[str]:
        proc = real(python, env)
        started.append(proc)
        return proc

    worker_starts.start_worker = counted  # type: ignore[assignment]
    try:
        first = starts.worker(sys.executable, worker_env(1))
        assert len(started) == 2 and started[0] is first
        spare = started[1]
        assert spare.poll() is None  # imported, waiting (await_ready returned)
        starts.spares = 0
        second = starts.worker(sys.executable, worker_env(1))
        assert second is spare and len(started) == 2
        starts.spares = 1
        third = starts.worker(sys.executable, worker_env(1))  # a pair again
        assert third is started[2] and len(started) == 4
        fourth = starts.worker(sys.executable, worker_env(2))  # other threads: a new pair
        assert len(started) == 6 and fourth is started[4]
        assert started[3].wait(10) == 0  # the unsuitable spare was let go
        starts.close()  # the new spare nobody used ends too
        assert started[5].wait(10) == 0
    finally:
        worker_starts.start_worker = real  # type: ignore[assignment]
        for proc in started:
            worker_starts.stop(proc)


def test_spares_are_off_on_one_core_and_by_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dlas.targets.host as host

    monkeypatch.setattr(host, "available_cores", lambda: 2)
    assert spare_count() == 1
    monkeypatch.setenv(worker_starts.ENV, "0")
    assert spare_count() == 0
    monkeypatch.delenv(worker_starts.ENV)
    monkeypatch.setattr(host, "available_cores", lambda: 1)
    assert spare_count() == 0


@pytest.mark.parametrize("spares", ["1", "0"])
def test_a_runs_second_model_is_timed_in_the_spare_started_with_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spares: str) -> None:
    """Two models, two timing groups: both workers start at the first group (the second
    one a spare) and the last group starts none; with spares off, one each. Every row is
    timed either way."""
    import dlas.targets.host as host

    monkeypatch.setattr(host, "available_cores", lambda: 2)
    monkeypatch.setenv(worker_starts.ENV, "" if spares == "1" else "0")
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "0")
    starts_at: list[int] = []
    real = worker_starts.start_worker

    def counted(python: str, env: dict[str, str]) -> subprocess.Popen[str]:
        starts_at.append(len(timed))
        return real(python, env)

    timed: list[str] = []
    monkeypatch.setattr(worker_starts, "start_worker", counted)
    text = tiny_sweep("two", algorithms=["direct"]).replace(
        "  - name: tiny_cnn\n", "  - name: tiny_cnn\n  - name: tiny_cnn_twin\n")
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    real_timings = runner.executor.timings

    def timings(entries, title=None):  # noqa: ANN001, ANN202
        timed.append(title or "")
        return real_timings(entries, title)

    runner.begin = lambda: None  # type: ignore[method-assign]
    runner.executor.timings = timings  # type: ignore[method-assign]
    report = runner.run(parse_config(text))
    assert report.ok == 2
    assert len(timed) == 2
    assert starts_at == ([1, 1] if spares == "1" else [1, 2]), starts_at


def test_a_passes_first_group_is_timed_in_the_spare_started_with_the_last_pass_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One model in two timing passes: pass 1's only group starts its worker and a spare
    (another pass follows), pass 2's group takes that spare and starts nothing, and no
    worker outlives the run."""
    import dlas.targets.host as host
    from dlas.runner.passes import run_in_passes

    monkeypatch.setattr(host, "available_cores", lambda: 2)
    monkeypatch.setenv(worker_starts.ENV, "")
    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "0")
    starts_at: list[int] = []
    procs: list[subprocess.Popen[str]] = []
    real = worker_starts.start_worker

    def counted(python: str, env: dict[str, str]) -> subprocess.Popen[str]:
        starts_at.append(len(timed))
        procs.append(real(python, env))
        return procs[-1]

    timed: list[str] = []
    monkeypatch.setattr(worker_starts, "start_worker", counted)
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    real_begin = runner.begin

    def begin() -> None:  # each run's fresh stage executor, its timings counted
        real_begin()
        real_timings = runner.executor.timings

        def timings(entries, title=None):  # noqa: ANN001, ANN202
            timed.append(title or "")
            return real_timings(entries, title)

        runner.executor.timings = timings  # type: ignore[method-assign]

    runner.begin = begin  # type: ignore[method-assign]
    report = run_in_passes(runner, parse_config(tiny_sweep("passes", algorithms=["direct"])),
                           passes=2)
    assert report.ok == 1
    assert len(timed) == 2
    assert starts_at == [1, 1], starts_at  # both at pass 1's group; none at pass 2's
    assert all(proc.poll() is not None for proc in procs)
    assert not runner.another_run_follows and runner._starts is None


def test_a_waiting_worker_takes_paths_with_a_tab_and_a_newline(tmp_path: Path) -> None:
    """The request travels as one JSON line, so a temporary folder whose name holds a tab
    or a newline (TMPDIR is the user's) still reaches the worker whole: an empty request
    is read and answered with an empty result."""
    import json
    from types import SimpleNamespace

    import cloudpickle

    from dlas.runner.worker_starts import hand_request

    odd = tmp_path / "a\tb\nc"
    odd.mkdir()
    request, result = odd / "request.pkl", odd / "result.json"
    request.write_bytes(cloudpickle.dumps(SimpleNamespace(
        threads=1, cpus=None, cache_dir=str(tmp_path / "cache"),
        workspace_root=str(tmp_path), members=[], mode="time", probe_placement=False)))
    proc = start_worker(sys.executable, worker_env(1))
    try:
        assert await_ready(proc)
        hand_request(proc, request, result)
        assert proc.wait(60) == 0
        assert json.loads(result.read_text()) == []
    finally:
        worker_starts.stop(proc)
