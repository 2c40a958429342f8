"""Run a sweep on this machine: every point through the stage graph, cached, resumable,
failure-tolerant, and safe beside other dlas processes on the same workspace.

- The local `SweepExecutor` (`dlas.runner.sweep_executor`): the shared base decides which
  points run and records them; this walks each point's plan (`dlas.runner.point_plan`).
- `dlas.runner.executor` runs each point's stages (`dlas.stages`): entries in the cache
  are loaded, missing ones computed once, across processes too (claims).
- A failing point is recorded (stage, error, traceback) and the sweep goes on, unless
  `fail_fast`. A shared stage that failed fails its dependants without being retried.
- Ctrl-C stops the sweep; everything completed so far is in the cache and the database,
  and training resumes from its last epoch checkpoint, so re-running picks up from there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dlas.results.row import ResultRow
from dlas.results.store import ResultStore
from dlas.runner.claims import POLL_S, Claims
from dlas.runner.compile_ahead import CompileAhead, compile_due, compile_wanted, helper_count
from dlas.runner.console import RunConsole
from dlas.runner.executor import EntryBusy, StageExecutor, StageFailed
from dlas.runner.machine import MachineLock
from dlas.runner.placement_waits import PlacementWaits
from dlas.runner.point_plan import PointPlan, complete_row
from dlas.runner.rows import failed_row, new_row, unmeasurable_row
from dlas.runner.sweep_executor import (
    PlanExecutor,
    SweepRun,
    clean_stale,
    points_to_run,
    record_row,
)
from dlas.runner.worker_starts import WorkerStarts, spare_count
from dlas.runner.workspace import RunReport, Workspace
from dlas.stages import BY_NAME, STAGES
from dlas.stages.base import StageEnv
from dlas.stages.compile import COMPILE, tunes
from dlas.stages.facts import CompileFacts, Facts, MeasureFacts

#: `Runner._hand_over`'s answers: work on the point, leave it to its helper, start the
#: pass over.
GO, SKIP, RESTART = "go", "skip", "restart"

__all__ = ["RunReport", "Runner", "Workspace", "clean_stale", "points_to_run", "record_row"]


@dataclass
class _Pending:
    """A point on its way through a run: its stage facts as they become known."""

    plan: PointPlan
    row: ResultRow
    #: The run's stage seconds when the point started (its own are the difference).
    before: dict[str, float]
    #: Its prepared stages' facts, by stage name.
    facts: dict[str, Facts] = field(default_factory=dict)
    #: Its upstream stages are stored: only the timing entry is left.
    prepared: bool = False
    #: What another process is computing that this point waits for.
    busy: EntryBusy | None = None


class Runner(PlanExecutor):
    """The local executor: one process; points prepared in sweep order (every stage up to
    the timing), then each model's variants timed together in a timing worker
    (`dlas.runner.timing_groups`). Beside other dlas processes on the same workspace it never
    queues behind them: an entry another process is computing is left to it, other
    points go on, and the point is picked up again when that entry is stored."""

    def __init__(self, workspace: Workspace, *, progress: bool = True,
                 console: RunConsole | None = None,
                 machine_lock: MachineLock | None = None) -> None:
        super().__init__(workspace, progress=progress, console=console)
        self.claims = Claims(self.cache.root)
        self.machine_lock = machine_lock or MachineLock()
        self._ahead: CompileAhead | None = None
        #: The timing workers kept from the last run while another follows: a spare that
        #: imported beside its last group serves the next run's first
        #: (`dlas.runner.worker_starts`).
        self._starts: WorkerStarts | None = None
        #: Whether this series of runs still waits for near placement (one wait that came
        #: to nothing ends them: `dlas.runner.placement_waits`).
        self.placement_waits = PlacementWaits()
        self.begin()

    def begin(self) -> None:
        """A fresh stage executor for each run, counting into its report."""
        env = StageEnv(self.workspace.root, self.console, self.progress)
        self.executor = StageExecutor(self.cache, env, self.report, claims=self.claims,
                                      machine=self.machine_lock, wait_for_claims=False,
                                      timing_source=self.timing_source)

    # -- one point --------------------------------------------------------------------

    def _prepare(self, state: _Pending, pending: list[_Pending]) -> ResultRow | None:
        """Every stage of the point up to its timing entry. The finished row when the
        point ends here (failed, or a target nothing here can run); None when it waits
        for its timing. Raises `EntryBusy` while another process computes one of them.
        Before its own untuned compile, it hands the next due ones to idle helpers."""
        plan = state.plan
        try:
            for stage in plan.prepared:
                if stage is COMPILE and self._ahead is not None and not tunes(plan.point):
                    self._ahead.offer([(s.plan.point, s.plan.keys) for s in pending
                                       if s is not state and not s.prepared])
                state.facts[stage.name] = self.executor.facts(plan.point, plan.keys, stage)
        except StageFailed as failure:
            return failed_row(state.row, failure.stage, failure.message, failure.tb)
        if plan.timed is None:  # compiled and cached; nothing here can run it
            compiled = state.facts[plan.prepared[-1].name]
            assert isinstance(compiled, CompileFacts)
            return unmeasurable_row(state.row, plan.unmeasurable, compiled)
        state.prepared = True
        return None

    def _finish(self, state: _Pending, store: ResultStore,
                outcome: MeasureFacts | StageFailed) -> ResultRow:
        if isinstance(outcome, StageFailed):
            return failed_row(state.row, outcome.stage, outcome.message, outcome.tb)
        return complete_row(store, state.plan, state.row, state.facts, outcome)

    # -- the sweep --------------------------------------------------------------------

    def walk(self, run: SweepRun, plans: list[PointPlan]) -> None:
        self._ahead = self._compile_ahead(plans)
        starts, self._starts = self._starts or WorkerStarts(), None
        self.executor.worker_starts = starts
        self.executor.placement_waits = self.placement_waits
        finished = False
        try:
            self._walk(run, plans)
            finished = True
        finally:
            self.executor.worker_starts = None
            if finished and self.another_run_follows:
                self._starts = starts  # its spare serves the next run's first group
            else:
                starts.close()
            if self._ahead is not None:
                self._ahead.close()
                self._ahead = None

    def end_runs(self) -> None:
        """Let the spare kept for a next run go (`run_in_passes` ended); a next series
        waits for near placement afresh."""
        self.placement_waits = PlacementWaits()
        if self._starts is not None:
            self._starts.close()
            self._starts = None

    def _compile_ahead(self, plans: list[PointPlan]) -> CompileAhead | None:
        """Helpers for the run's untuned compiles (`dlas.runner.compile_ahead`): none on
        one core, with `DLAS_COMPILE_AHEAD=0`, or for fewer than two such compiles."""
        helpers = helper_count()
        if helpers == 0:
            return None
        due = sum(1 for p in plans if compile_wanted(self.cache, p.point, p.keys))
        if due < 2:
            return None
        try:
            ahead = CompileAhead(self.cache, self.workspace.root,
                                 self.machine_lock.directory, min(helpers, due - 1))
        except OSError as exc:  # no process could start: the run computes everything
            self.console.note(f"compile helpers not started ({exc}); compiling here only")
            return None
        self.executor.helper_pids = ahead.pids
        return ahead

    def _hand_over(self, state: _Pending, skipped: bool, pending: list[_Pending]) -> str:
        """With helpers, before this process works on `state`: `SKIP` when a helper
        compiles `state` (this process leaves it and comes back; its group is not timed
        meanwhile). When `state` needs heavy work (training, fine-tuning, tuning), which
        never runs beside a helper, and helpers are busy or this pass `skipped` points for
        them: `SKIP` too while a later point has an untuned compile no helper holds (this
        process compiles it meanwhile instead of idling), else `RESTART`: the helpers
        were waited for, and the pass starts over, so the points they finished are taken
        up and their group timed before the next model trains. Else `GO`. (`_prepare`
        hands compiles over.)

        Why the light work first: the quickstart's tuned point waited 4.5 s (Zen 4) for
        one helper to compile three variants of its model, one core idle, while a
        second of those compiles was free for this process to take."""
        ahead = self._ahead
        if ahead is None or state.prepared:
            return GO
        keys = state.plan.keys
        if COMPILE.name in keys and ahead.holds(keys[COMPILE.name]):
            return SKIP
        if not self._light(state) and (skipped or ahead.busy()):
            later = pending[pending.index(state) + 1:]
            if any(self._compile_free(s) for s in later):
                return SKIP
            ahead.drain()
            return RESTART
        return GO

    def _light(self, state: _Pending) -> bool:
        """Whether `state` needs no heavy work here: it does not tune, and its model is
        stored up to the stage before the import (trained, compressed)."""
        point, keys = state.plan.point, state.plan.keys
        before_import = BY_NAME[COMPILE.parent or ""].parent
        return (not tunes(point) and before_import is not None and before_import in keys
                and self.cache.has(before_import, keys[before_import]))

    def _compile_free(self, state: _Pending) -> bool:
        """Whether this process could compile `state` now: unprepared, an untuned compile
        due (its imported model stored), held by no helper and claimed by nobody."""
        assert self._ahead is not None
        if state.prepared or state.busy is not None:
            return False
        point, keys = state.plan.point, state.plan.keys
        return (compile_due(self.cache, point, keys)
                and not self._ahead.holds(keys[COMPILE.name])
                and not self.claims.is_held(COMPILE.name, keys[COMPILE.name]))

    def _walk(self, run: SweepRun, plans: list[PointPlan]) -> None:
        pending = [_Pending(plan, new_row(plan.point, run.name), dict(self.report.seconds))
                   for plan in plans]
        waiting_said: set[str] = set()
        while pending and not run.stopped:
            progressed = skipped = False
            for state in [s for s in pending if not s.prepared]:
                if state not in pending:  # finished with an earlier point's group
                    continue
                step = self._hand_over(state, skipped, pending)
                if step == SKIP:
                    skipped = True
                    continue
                if step == RESTART:
                    progressed = True
                    break
                if state.busy is None:
                    self.console.point_start(state.plan.index, run.points, state.plan.point)
                try:
                    done = self._prepare(state, pending)
                except EntryBusy as busy:
                    if busy.holder is None or self.executor.is_helper(busy.holder.pid,
                                                                      busy.holder.host):
                        # this run's helper took the compile after `_hand_over` looked,
                        # or a process took the claim and has not yet written its name
                        # in it (it does right after locking; CI once read it between
                        # the two and timed a model in two groups): come back for it,
                        # and its group waits (as for SKIP); by then the holder is known
                        skipped = True
                        continue
                    state.busy = busy
                    continue
                state.busy = None
                progressed = True
                if done is not None:
                    pending.remove(state)
                    self._record(run, state, done)
                    if run.stopped:
                        return
                # a model's points are consecutive in the grid: time its variants as
                # soon as the last one is prepared, before the next model trains
                for members in self._timing_groups(pending, only=state.plan.group):
                    self._time(run, members, pending)
                    if run.stopped:
                        return
            for members in self._timing_groups(pending, retry_busy=True):
                progressed = self._time(run, members, pending) or progressed
                if run.stopped:
                    return
            if pending and not progressed:
                self._wait(pending, waiting_said)

    def _time(self, run: SweepRun, members: list[_Pending], pending: list[_Pending]) -> bool:
        """Time a group and record its finished points: whether any finished."""
        from dlas.runner.timing_groups import group_title

        if self._ahead is not None:
            self._ahead.drain()  # a timing holds the machine alone: let helpers finish
        starts = self.executor.worker_starts
        if starts is not None:
            # a spare imports beside this group's worker when another group follows, in
            # this run or (a timing pass) in the next
            later = {s.plan.group for s in pending if s.plan.timed is not None}
            follows = bool(later - {members[0].plan.group}) or self.another_run_follows
            starts.spares = spare_count() if follows else 0
        outcomes = self.executor.timings([(s.plan.point, s.plan.keys) for s in members],
                                         group_title(members[0].plan.point))
        finished = False
        for state, outcome in zip(members, outcomes, strict=True):
            if isinstance(outcome, EntryBusy):  # another process times it
                state.busy = outcome
                continue
            finished = True
            pending.remove(state)
            self._record(run, state, self._finish(state, run.store, outcome))
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
            key = state.plan.group
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

    def _record(self, run: SweepRun, state: _Pending, row: ResultRow) -> None:
        """Record a finished point, with the stage seconds spent since it started."""
        row.stage_seconds = {s: self.report.seconds[s] - state.before.get(s, 0.0)
                             for s in STAGES}
        # its timing came later than its start: say which point the result is
        self.record(run, state.plan, row, announce=state.prepared)
