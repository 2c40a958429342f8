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

from dlas import registry
from dlas.results.row import ResultRow
from dlas.results.store import ResultStore
from dlas.runner.cache import Cache
from dlas.runner.claims import POLL_S, Claims
from dlas.runner.console import RunConsole
from dlas.runner.executor import EntryBusy, StageExecutor, StageFailed, StageTally
from dlas.runner.machine import MachineLock
from dlas.runner.rows import failed_row, finish_row, new_row, record_timing, unmeasurable_row
from dlas.runner.timing import group_key, group_title
from dlas.stages import COMPILE, COMPRESS, IMPORT, STAGES, TRAIN, stage_keys
from dlas.stages.base import StageEnv
from dlas.stages.facts import CompileFacts, CompressFacts, ImportFacts, MeasureFacts, TrainFacts
from dlas.stages.keys import StageKeys
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
    rows: list[ResultRow] = field(default_factory=list)

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
                  console: RunConsole, *, retry_failed: bool, sweep: str
                  ) -> Iterator[tuple[int, Point]]:
    """The points a run computes, with their 1-based index: a point that failed before is
    skipped (reported, its row kept, and listed as the sweep's) unless `retry_failed`,
    which runs only those."""
    for i, point in enumerate(points, 1):
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
    """Remove the half-written entries killed runs left (not those being written)."""
    removed = cache.clean_stale(claims.is_held)
    if removed:
        console.note(f"removed {removed} half-written cache folder(s) that interrupted "
                     "runs left")


@dataclass
class _Pending:
    """A point on its way through a run: its stage facts as they become known."""

    index: int
    point: Point
    keys: StageKeys
    row: ResultRow
    before: dict[str, float]
    trained: TrainFacts | None = None
    compressed: CompressFacts | None = None
    imported: ImportFacts | None = None
    compiled: CompileFacts | None = None
    #: Its upstream stages are stored: only the timing entry is left.
    prepared: bool = False
    #: What another process is computing that this point waits for.
    busy: EntryBusy | None = None


class Runner:
    """The local executor: one process; points prepared in sweep order (every stage up to
    the timing), then each model's variants timed together in a timing worker
    (`dlas.runner.timing`). Beside other dlas processes on the same workspace it never
    queues behind them: an entry another process is computing is left to it, other
    points go on, and the point is picked up again when that entry is stored."""

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
        self.timing_source = "sweep"
        self._new_executor()

    def _new_executor(self) -> None:
        env = StageEnv(self.workspace.root, self.console, self.progress)
        self.executor = StageExecutor(self.cache, env, self.report, claims=self.claims,
                                      machine=self.machine_lock, wait_for_claims=False,
                                      timing_source=self.timing_source)

    # -- one point --------------------------------------------------------------------

    def _prepare(self, state: _Pending) -> ResultRow | None:
        """Every stage of the point up to its timing entry. The finished row when the
        point ends here (failed, or a target nothing here can run); None when it waits
        for its timing. Raises `EntryBusy` while another process computes one of them."""
        ex, point, keys = self.executor, state.point, state.keys
        try:
            state.trained = ex.facts(point, keys, TRAIN)
            state.compressed = ex.facts(point, keys, COMPRESS)
            state.imported = ex.facts(point, keys, IMPORT)
            if not point.is_baseline:
                state.compiled = ex.facts(point, keys, COMPILE)
                unmeasurable = resolve_target(point).unmeasurable
                if unmeasurable:  # compiled and cached; nothing here can run it
                    return unmeasurable_row(state.row, unmeasurable, state.compiled)
        except StageFailed as failure:
            return failed_row(state.row, failure.stage, failure.message, failure.tb)
        state.prepared = True
        return None

    def _finish(self, state: _Pending, store: ResultStore,
                outcome: MeasureFacts | StageFailed) -> ResultRow:
        if isinstance(outcome, StageFailed):
            return failed_row(state.row, outcome.stage, outcome.message, outcome.tb)
        point = state.point
        stage = "baseline" if point.is_baseline else "measure"
        history = record_timing(store, point, state.keys[stage], outcome)
        assert state.trained and state.compressed and state.imported
        return finish_row(state.row, point, state.trained, state.compressed, state.imported,
                          state.compiled, outcome, history, state.keys[stage])

    # -- the sweep --------------------------------------------------------------------

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
                self._run(config.name, points, store, fail_fast, retry_failed)
            except KeyboardInterrupt:
                report.interrupted = True
            finally:
                report.wall_seconds = time.perf_counter() - start
                self.console.summary(report)
        return report

    def _run(self, sweep: str, points: list[Point], store: ResultStore, fail_fast: bool,
             retry_failed: bool) -> None:
        report, n = self.report, len(points)
        pending: list[_Pending] = []
        for i, point in points_to_run(points, store, report, self.console,
                                      retry_failed=retry_failed, sweep=sweep):
            row = new_row(point, sweep)
            if point.blocked:
                self.console.point_start(i, n, point)
                record_row(store, report, self.console,
                           row.update(status="not_runnable", error=point.blocked), sweep)
                continue
            pending.append(_Pending(i, point, stage_keys(point), row,
                                    dict(self.report.seconds)))
        waiting_said: set[str] = set()
        while pending:
            progressed = False
            for state in [s for s in pending if not s.prepared]:
                if state not in pending:  # finished with an earlier point's group
                    continue
                if state.busy is None:
                    self.console.point_start(state.index, n, state.point)
                try:
                    done = self._prepare(state)
                except EntryBusy as busy:
                    state.busy = busy
                    continue
                state.busy = None
                progressed = True
                if done is not None:
                    pending.remove(state)
                    if self._record(store, state, done, sweep, fail_fast):
                        return
                # a model's points are consecutive in the grid: time its variants as
                # soon as the last one is prepared, before the next model trains
                group = group_key(state.point)
                for members in self._timing_groups(pending, only=group):
                    if self._time(members, pending, store, sweep, fail_fast) is None:
                        return
            for members in self._timing_groups(pending, retry_busy=True):
                finished = self._time(members, pending, store, sweep, fail_fast)
                if finished is None:
                    return
                progressed = progressed or finished
            if pending and not progressed:
                self._wait(pending, waiting_said)

    def _time(self, members: list[_Pending], pending: list[_Pending], store: ResultStore,
              sweep: str, fail_fast: bool) -> bool | None:
        """Time a group and record its finished points: whether any finished, or None
        when the sweep stops here (--fail-fast)."""
        outcomes = self.executor.timings([(s.point, s.keys) for s in members],
                                         group_title(members[0].point))
        finished = False
        for state, outcome in zip(members, outcomes, strict=True):
            if isinstance(outcome, EntryBusy):  # another process times it
                state.busy = outcome
                continue
            finished = True
            pending.remove(state)
            if self._record(store, state, self._finish(state, store, outcome), sweep,
                            fail_fast):
                return None
        return finished

    @staticmethod
    def _timing_groups(pending: list[_Pending], only: str | None = None,
                       retry_busy: bool = False) -> list[list[_Pending]]:
        """Prepared points, grouped by model, whose group has nothing left to prepare here
        (a member another process is still preparing does not hold the group back once
        everything else is done). Points whose timing another process holds are left out
        unless `retry_busy` (then they are found stored, or still busy)."""
        groups: dict[str, list[_Pending]] = {}
        for state in pending:
            key = group_key(state.point)
            if only is None or key == only:
                groups.setdefault(key, []).append(state)
        ready = []
        for members in groups.values():
            unprepared = [s for s in members if not s.prepared]
            if any(s.busy is None for s in unprepared):
                continue  # this process still has work to do on the group
            timed = [s for s in members if s.prepared and (retry_busy or s.busy is None)]
            if timed:
                ready.append(timed)
        return ready

    def _wait(self, pending: list[_Pending], said: set[str]) -> None:
        """Nothing could progress: every remaining point waits for another process."""
        busy = next((s.busy for s in pending if s.busy is not None), None)
        if busy is not None and busy.key not in said:
            said.add(busy.key)
            self.console.note(f"waiting: {busy}")
        time.sleep(POLL_S)

    def _record(self, store: ResultStore, state: _Pending, row: ResultRow, sweep: str,
                fail_fast: bool) -> bool:
        """Record a finished point; True when the sweep stops here (--fail-fast)."""
        row.stage_seconds = {s: self.report.seconds[s] - state.before.get(s, 0.0)
                             for s in STAGES}
        if state.prepared:  # its timing came later: say which point the result is
            self.console.point_start(state.index, self.report.points, state.point)
        record_row(store, self.report, self.console, row, sweep)
        if fail_fast and row.status in ("failed", "verification_failed"):
            self.console.note("stopping: --fail-fast and a point failed")
            return True
        return False
