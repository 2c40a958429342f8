"""A run stops waiting for near placement once one wait came to nothing
(`dlas.runner.placement_waits`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from dlas.measure.record import TimingRun
from dlas.measure.stopping import RoundsPolicy
from dlas.runner.machine import MachineLock
from dlas.runner.placement_waits import PlacementWaits
from dlas.runner.runner import Runner, Workspace
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep


def run_with(events: list[dict[str, Any]]) -> TimingRun:
    return TimingRun(run_id="r", started_at=0.0, placement="far", rounds=[], events=events)


def failed_wait(seconds: float = 10.0) -> dict[str, Any]:
    return {"event": "placement_wait", "target": "near", "placement": "far",
            "reached": False, "seconds": seconds}


def test_one_wait_in_vain_ends_the_waits_of_the_run_and_is_said_once() -> None:
    planned = RoundsPolicy(samples=4, min_rounds=4, placement_budget_s=10.0)
    waits = PlacementWaits()
    assert waits.policy(planned) is planned
    reached = {**failed_wait(3.0), "placement": "near", "reached": True}
    assert waits.observe("a", [run_with([reached]), None]) is None  # a wait that paid
    assert waits.observe("b", [run_with([])]) is None  # no wait at all
    assert waits.policy(planned) is planned
    said = waits.observe("resnet18", [None, run_with([failed_wait(10.4)])])
    assert said and "a 10 s wait (resnet18)" in said and "near placement" in said
    assert waits.policy(planned).target_wait is False
    assert waits.policy(planned).placement_budget_s == 10.0  # rule 3's bound stays
    assert dataclasses.replace(waits.policy(planned), target_wait=True) == planned
    assert waits.observe("mobilenetv2", [run_with([failed_wait()])]) is None  # said once


def test_a_sweeps_later_groups_skip_the_wait_after_one_came_to_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two timing passes of one model: the first group's wait is made to come to nothing
    (its answer carries a wait that ended far); the second pass's group is asked for no
    wait, the console says why once, and a new series of runs waits again."""
    from dlas.runner import timing_groups
    from dlas.runner.passes import run_in_passes

    monkeypatch.setenv("DLAS_COMPILE_AHEAD", "0")
    capped = timing_groups.rounds_policy
    monkeypatch.setattr(timing_groups, "rounds_policy", lambda point, passes=None: (
        dataclasses.replace(capped(point, passes), placement_budget_s=1.0)))
    real = timing_groups.time_group
    budgets: list[tuple[float, bool]] = []

    def time_group(request: Any, events: Any, **kw: Any) -> Any:
        budgets.append((request.policy.placement_budget_s, request.policy.target_wait))
        got = real(request, events, **kw)
        if len(budgets) == 1:
            for result in got:
                result.meta["timing"]["events"].append(failed_wait(1.0))
        return got

    monkeypatch.setattr(timing_groups, "time_group", time_group)
    notes: list[str] = []
    runner = Runner(Workspace(tmp_path, tmp_path / "cache"), progress=False,
                    machine_lock=MachineLock(tmp_path / "locks"))
    monkeypatch.setattr(runner.console, "note", notes.append)
    config = parse_config(tiny_sweep("waits", algorithms=["direct"]))
    report = run_in_passes(runner, config, passes=2)
    assert report.ok == 1
    assert budgets == [(1.0, True), (1.0, False)], budgets
    assert sum("do not wait for it" in n for n in notes) == 1, notes
    assert runner.placement_waits.in_vain is None  # the series ended: the next one waits
