"""Run a sweep on this machine: every point through the stage graph, cached, resumable,
failure-tolerant, and safe beside other dlas processes on the same workspace.

- `dlas.runner.executor` runs each point's stages (`dlas.stages`): entries in the cache
  are loaded, missing ones computed once, across processes too (claims).
- A failing point is recorded (stage, error, traceback) and the sweep goes on, unless
  `fail_fast`. A shared stage that failed fails its dependants without being retried.
- Ctrl-C stops the sweep; everything completed so far is in the cache and the database,
  and training resumes from its last epoch checkpoint, so re-running picks up from there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas import registry
from dlas.results.store import ResultStore
from dlas.runner.cache import Cache
from dlas.runner.claims import Claims
from dlas.runner.console import RunConsole
from dlas.runner.executor import StageExecutor, StageFailed, StageTally
from dlas.runner.machine import MachineLock
from dlas.runner.rows import failed_row, finish_row, new_row, unmeasurable_row
from dlas.stages import BASELINE, COMPILE, COMPRESS, IMPORT, MEASURE, STAGES, TRAIN, stage_keys
from dlas.stages.base import StageEnv
from dlas.stages.facts import CompileFacts
from dlas.sweep.config import SweepConfig
from dlas.sweep.grid import Point, expand
from dlas.targets.resolve import resolve_target


@dataclass
class RunReport(StageTally):
    points: int = 0
    ok: int = 0
    failed: int = 0
    verification_failed: int = 0
    not_runnable: int = 0
    skipped_failed: int = 0
    interrupted: bool = False
    wall_seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recomputed_nothing(self) -> bool:
        return not any(self.computed[s] for s in STAGES if s != "data")


@dataclass
class Workspace:
    """Where a sweep's cache and results live (default: ./dlas-workspace)."""

    root: Path
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.cache_dir = Path(self.cache_dir) if self.cache_dir else self.root / "cache"

    @property
    def db_path(self) -> Path:
        return self.root / "results.db"


def points_to_run(points: list[Point], store: ResultStore, report: RunReport,
                  console: RunConsole, *, retry_failed: bool) -> Iterator[tuple[int, Point]]:
    """The points a run computes, with their 1-based index: a point that failed before is
    skipped (reported, its row kept) unless `retry_failed`, which runs only those."""
    for i, point in enumerate(points, 1):
        previous = store.get(point.key)
        was_failed = previous is not None and previous["status"] in (
            "failed", "verification_failed")
        if retry_failed and not was_failed:
            continue
        if was_failed and not retry_failed:
            report.skipped_failed += 1
            console.point_skipped(i, len(points), point, previous)
            report.rows.append(previous)
            continue
        yield i, point


def record_row(store: ResultStore, report: RunReport, console: RunConsole,
               row: dict[str, Any]) -> None:
    """Store a point's row, count its status, show it."""
    store.upsert(row)
    report.rows.append(row)
    status = row["status"]
    setattr(report, status, getattr(report, status) + 1)
    console.point_end(row)


def clean_stale(cache: Cache, claims: Claims, console: RunConsole) -> None:
    """Remove the half-written entries killed runs left (not those being written)."""
    removed = cache.clean_stale(claims.is_held)
    if removed:
        console.note(f"removed {removed} half-written cache folder(s) that interrupted "
                     "runs left")


class Runner:
    """The local executor: one process, points in sweep order."""

    def __init__(self, workspace: Workspace, *, progress: bool = True,
                 console: RunConsole | None = None,
                 machine_lock: MachineLock | None = None) -> None:
        self.workspace = workspace
        self.cache = Cache(workspace.cache_dir)
        self.claims = Claims(self.cache.root)
        self.machine_lock = machine_lock or MachineLock()
        self.console = console or RunConsole(progress=progress)
        self.progress = self.console.progress
        self.report = RunReport()
        self._new_executor()

    def _new_executor(self) -> None:
        env = StageEnv(self.workspace.root, self.console, self.progress)
        self.executor = StageExecutor(self.cache, env, self.report, claims=self.claims,
                                      machine=self.machine_lock)

    def run_point(self, point: Point, sweep: str) -> dict[str, Any]:
        row = new_row(point, sweep)
        if point.blocked:
            row.update(status="not_runnable", error=point.blocked)
            return row
        ex, keys = self.executor, stage_keys(point)
        before = dict(self.report.seconds)
        compiled: CompileFacts | None = None
        try:
            trained = ex.facts(point, keys, TRAIN)
            compressed = ex.facts(point, keys, COMPRESS)
            imported = ex.facts(point, keys, IMPORT)
            if point.is_baseline:
                measured = ex.facts(point, keys, BASELINE)
            else:
                compiled = ex.facts(point, keys, COMPILE)
                unmeasurable = resolve_target(point).unmeasurable
                if unmeasurable:  # compiled and cached; nothing here can run it
                    return unmeasurable_row(row, unmeasurable, compiled)
                measured = ex.facts(point, keys, MEASURE)
        except StageFailed as failure:
            return failed_row(row, failure.stage, failure.message, failure.tb)
        finally:
            row["stage_seconds"] = {s: self.report.seconds[s] - before.get(s, 0.0)
                                    for s in STAGES}
        return finish_row(row, point, trained, compressed, imported, compiled, measured)

    def run(self, config: SweepConfig, *, fail_fast: bool = False,
            retry_failed: bool = False) -> RunReport:
        registry.load_plugins()
        start = time.perf_counter()
        points = expand(config)
        self.report = report = RunReport(points=len(points))
        self._new_executor()
        clean_stale(self.cache, self.claims, self.console)
        self.console.sweep_header(config, points, self.workspace)
        with ResultStore(self.workspace.db_path) as store:
            try:
                for i, point in points_to_run(points, store, report, self.console,
                                              retry_failed=retry_failed):
                    self.console.point_start(i, len(points), point)
                    row = self.run_point(point, config.name)
                    record_row(store, report, self.console, row)
                    if fail_fast and row["status"] in ("failed", "verification_failed"):
                        self.console.note("stopping: --fail-fast and a point failed")
                        break
            except KeyboardInterrupt:
                report.interrupted = True
            finally:
                report.wall_seconds = time.perf_counter() - start
                self.console.summary(report)
        return report
