"""Timing passes (`dlas.runner.passes`): every point a run times gets its
`budgets.timing_passes` runs, and a `--retry-failed` run times the points it retried and
nothing else. The executor and the cache are modelled (what each run computes and which
timings are cached), so the passes' bookkeeping is checked without a sweep.

The case that showed the hole: the day profile was resumed with `--retry-failed` while 64
of its points were not yet computed. Pass 1 retried the 10 failed points only; pass 2 ran
the whole sweep, computing the 64 (their first timing run) and re-timing every other point
of the workspace; pass 3 gave the 64 their second run. They ended with 2 runs of the 3
asked, and a run told to retry failures had computed the rest of the sweep."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlas.results.row import ResultRow
from dlas.runner import passes
from dlas.runner.workspace import RunReport
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep


@dataclass
class World:
    """What the workspace holds: each computed point's timing runs, failed points, the
    points whose timing entry is cached."""

    runs: dict[str, int] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)
    cached: set[str] = field(default_factory=set)
    #: Points a first run does not reach (computed only by a later run).
    late: set[str] = field(default_factory=set)
    universe: tuple[str, ...] = ()


class FakeExecutor:
    def __init__(self, world: World) -> None:
        self.world = world
        self.calls: list[tuple[bool, frozenset[str] | None]] = []
        self.notes: list[str] = []
        self.workspace = SimpleNamespace(db_path=Path("unused.db"))
        self.cache = None
        self.console = SimpleNamespace(note=self.notes.append, table_in_summary=False)
        self.timing_source = "sweep"

    def run(self, config, *, fail_fast: bool = False, retry_failed: bool = False,  # noqa: ANN001
            only: frozenset[str] | None = None) -> RunReport:
        w, report = self.world, RunReport()
        first = not self.calls
        self.calls.append((retry_failed, only))
        for key in w.universe:
            if only is not None and key not in only:
                continue
            if retry_failed != (key in w.failed) or (first and key in w.late):
                continue
            w.failed.discard(key)
            if key not in w.runs:
                w.runs[key] = 1
            elif key not in w.cached:
                w.runs[key] += 1
            w.cached.add(key)
            report.rows.append(ResultRow(point_key=key, status="ok"))
        return report


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    w = World()

    def forget(config, db_path, cache, *, only_noisy, fewer_runs_than=None,  # noqa: ANN001, ANN202
               only=None):
        dropped = [k for k, n in w.runs.items()
                   if (fewer_runs_than is None or n < fewer_runs_than)
                   and (only is None or k in only) and k in w.cached]
        w.cached.difference_update(dropped)
        return [SimpleNamespace(key=k) for k in dropped]

    monkeypatch.setattr(passes, "forget_timings", forget)
    return w


def test_a_retry_times_the_points_it_retried_and_nothing_else(world: World) -> None:
    """Pass 1 retries the failed point; the later passes time it again and leave alone
    both the points that had their runs and the point the sweep had yet to compute."""
    world.universe = ("done_a", "done_b", "failed", "not_yet")
    world.runs = {"done_a": 1, "done_b": 1}
    world.cached = {"done_a", "done_b"}
    world.failed = {"failed"}
    executor = FakeExecutor(world)
    passes._passes(executor, parse_config(tiny_sweep()), 3, fail_fast=False,
                   retry_failed=True, remeasure=None)
    assert world.runs == {"done_a": 1, "done_b": 1, "failed": 3}
    assert executor.calls == [(True, None), (False, frozenset({"failed"})),
                              (False, frozenset({"failed"}))]


def test_a_point_first_timed_after_pass_1_gets_every_run(world: World) -> None:
    """A point the first pass did not reach is computed by pass 2 (one run) and timed by
    pass 3 (two); an extra pass, of that point alone, gives it the third."""
    world.universe = ("early", "late")
    world.late = {"late"}
    executor = FakeExecutor(world)
    passes._passes(executor, parse_config(tiny_sweep()), 3, fail_fast=False,
                   retry_failed=False, remeasure=None)
    assert world.runs == {"early": 3, "late": 3}
    assert executor.calls[-1] == (False, frozenset({"late"}))
    assert len(executor.calls) == 4
    assert any("an extra pass" in n and "owe runs of the 3 passes" in n
               for n in executor.notes)


def test_points_with_all_their_runs_take_no_extra_pass(world: World) -> None:
    world.universe = ("a", "b")
    executor = FakeExecutor(world)
    passes._passes(executor, parse_config(tiny_sweep()), 3, fail_fast=False,
                   retry_failed=False, remeasure=None)
    assert world.runs == {"a": 3, "b": 3} and len(executor.calls) == 3
    assert not any("extra pass" in n for n in executor.notes)
