"""What runs a sweep: the `SweepExecutor` protocol, and the part every executor shares.

`dlas run` and `dlas reproduce` take any `SweepExecutor` (`dlas.runner.executor_choice`: the local
`Runner`, or the `RayRunner` on a cluster). Both derive from `PlanExecutor`, which owns
everything but the walk itself, once:

- the prologue: plugins loaded, the grid expanded, half-written cache entries that killed
  runs left removed, the sweep's header;
- which points run: a point that failed before is skipped (its row kept, still the
  sweep's) unless `retry_failed`, which runs only those; a blocked point (an option
  that cannot apply to it) is recorded `not_runnable` without any work;
- each runnable point's `PointPlan` (`dlas.runner.point_plan`), read off the stage graph;
- recording a finished point, and stopping at the first failure under `fail_fast`;
- interrupts: Ctrl-C or SIGTERM (`dlas.runner.signals`) anywhere in the walk marks the
  report interrupted, prints the summary and returns: what finished is cached and
  recorded, and the same command resumes.

An executor supplies `walk` (how the plans' stages get computed and timed) and, if it
needs one, a `session` around the run (a Ray cluster).
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dlas import registry
from dlas.results.row import ResultRow
from dlas.results.store import ResultStore
from dlas.runner.cache import Cache
from dlas.runner.claims import Claims
from dlas.runner.console import RunConsole
from dlas.runner.point_plan import PointPlan, plan_point
from dlas.runner.rows import new_row
from dlas.runner.workspace import RunReport, Workspace
from dlas.stages.keys import KeyMemo
from dlas.sweep.config import SweepConfig
from dlas.sweep.grid import Point, expand


@runtime_checkable
class SweepExecutor(Protocol):
    """Runs a sweep's points through the stage graph into the workspace's cache and
    results database, and says what it did."""

    workspace: Workspace
    cache: Cache
    console: RunConsole
    #: The last run's report (stage tallies, point counts, rows).
    report: RunReport
    #: What timing runs record as their source: "sweep", or "remeasure".
    timing_source: str
    #: Set by `dlas.runner.passes.run_in_passes` while another pass follows this run.
    another_run_follows: bool

    def run(self, config: SweepConfig, *, fail_fast: bool = False,
            retry_failed: bool = False, only: frozenset[str] | None = None) -> RunReport:
        """Run the sweep (cached: a second run recomputes nothing; interrupted: the report
        says so, and the same call resumes). Its timings are one pass of the config's
        `budgets.timing_passes` (each takes its share of the rounds and samples);
        `dlas.runner.passes.run_in_passes` runs all of them. `only`: the keys of the
        points to run (the later passes of a `--retry-failed` run); None, all."""
        ...

    def end_runs(self) -> None:
        """The last of a series of runs has ended (`run_in_passes`, whatever way it
        ended): let go of what was kept for a run to follow."""
        ...


@dataclass
class SweepRun:
    """One run of a sweep, as its walk sees it."""

    name: str
    store: ResultStore
    fail_fast: bool
    #: Points in the sweep's grid (for "[i/n]").
    points: int
    #: Set when a point failed under `fail_fast`: start nothing new.
    stopped: bool = False


class PlanExecutor(ABC):
    """The shared part of an executor (see the module's docstring); subclasses walk the
    plans."""

    def __init__(self, workspace: Workspace, *, progress: bool = True,
                 console: RunConsole | None = None) -> None:
        self.workspace = workspace
        self.cache = Cache(workspace.cache_dir)
        self.console = console or RunConsole(progress=progress)
        self.progress = self.console.progress
        self.report = RunReport()
        self.timing_source = "sweep"
        self.another_run_follows = False

    # -- what an executor supplies ----------------------------------------------------

    def session(self) -> contextlib.AbstractContextManager[None]:
        """Around the whole run (a cluster to join and leave); nothing by default."""
        return contextlib.nullcontext()

    def opened(self) -> None:  # noqa: B027 - most executors have nothing to say
        """Called after the sweep's header, inside the session (say where it runs)."""

    @abstractmethod
    def walk(self, run: SweepRun, plans: list[PointPlan]) -> None:
        """Compute and time the plans' points, recording each (`record`) as it finishes;
        return early once `run.stopped`."""

    # -- the shared run ---------------------------------------------------------------

    def run(self, config: SweepConfig, *, fail_fast: bool = False,
            retry_failed: bool = False, only: frozenset[str] | None = None) -> RunReport:
        registry.load_plugins()
        start = time.perf_counter()
        points = expand(config)
        self.report = report = RunReport(points=len(points))
        self.begin()
        with self.session():
            clean_stale(self.cache, Claims(self.cache.root), self.console)
            self.console.sweep_header(config, points, self.workspace)
            self.opened()
            with ResultStore(self.workspace.db_path) as store:
                run = SweepRun(config.name, store, fail_fast, len(points))
                try:
                    self.walk(run, self._plans(run, points, retry_failed, only))
                except KeyboardInterrupt:
                    report.interrupted = True
                finally:
                    clean_stale(self.cache, Claims(self.cache.root), self.console)
                    report.wall_seconds = time.perf_counter() - start
                    self.console.summary(report)
        return report

    def end_runs(self) -> None:  # noqa: B027 - only the local executor keeps anything
        """After the last of a series of runs (`run_in_passes`): let go of what was kept
        for the next one (the local executor's spare timing worker)."""

    def begin(self) -> None:  # noqa: B027 - the local executor renews its stage executor
        """Called once a run's report exists, before anything else happens."""

    def _plans(self, run: SweepRun, points: list[Point], retry_failed: bool,
               only: frozenset[str] | None = None) -> list[PointPlan]:
        """The plans of the points this run computes; blocked points are recorded here."""
        memo = KeyMemo()
        plans = []
        for i, point in points_to_run(points, run.store, self.report, self.console,
                                      retry_failed=retry_failed, sweep=run.name, only=only):
            if point.blocked:
                self.console.point_start(i, run.points, point)
                row = new_row(point, run.name).update(status="not_runnable",
                                                      error=point.blocked)
                record_row(run.store, self.report, self.console, row, run.name)
                continue
            plans.append(plan_point(i, point, memo))
        return plans

    def record(self, run: SweepRun, plan: PointPlan, row: ResultRow, *,
               announce: bool = True) -> None:
        """Store a finished point's row and show it (`announce`: say which point first,
        where its start was not just said); under `fail_fast` a failure stops the run."""
        if announce:
            self.console.point_start(plan.index, run.points, plan.point)
        record_row(run.store, self.report, self.console, row, run.name)
        if run.fail_fast and row.status in ("failed", "verification_failed") \
                and not run.stopped:
            run.stopped = True
            self.console.note("stopping: --fail-fast and a point failed")


def points_to_run(points: list[Point], store: ResultStore, report: RunReport,
                  console: RunConsole, *, retry_failed: bool, sweep: str,
                  only: frozenset[str] | None = None) -> Iterator[tuple[int, Point]]:
    """The points a run computes, with their 1-based index: a point that failed before is
    skipped (reported, its row kept, and listed as the sweep's) unless `retry_failed`,
    which runs only those; with `only`, none but the points whose keys it holds."""
    for i, point in enumerate(points, 1):
        if only is not None and point.key not in only:
            continue
        previous = store.get(point.key)
        was_failed = previous is not None and previous.status in (
            "failed", "verification_failed")
        if retry_failed and not was_failed:
            continue
        if was_failed and not retry_failed:
            assert previous is not None
            report.skipped_failed += 1
            console.point_skipped(i, len(points), point, previous)
            store.add_member(sweep, point.key)
            report.rows.append(previous)
            continue
        yield i, point


def record_row(store: ResultStore, report: RunReport, console: RunConsole,
               row: ResultRow, sweep: str) -> None:
    """Store a point's row (a member of `sweep`), count its status, show it."""
    store.upsert(row, sweep=sweep)
    report.rows.append(row)
    status = row.status
    setattr(report, status, getattr(report, status) + 1)
    console.point_end(row)


def clean_stale(cache: Cache, claims: Claims, console: RunConsole) -> None:
    """Remove the half-written entries and the claim files killed processes left (not
    those of entries being written); at a run's start and end, so a run that outlived a
    killed worker leaves a clean cache."""
    removed = cache.clean_stale(claims.is_held)
    claims.prune()
    if removed:
        console.note(f"removed {removed} half-written cache folder(s) that interrupted "
                     "runs left")
