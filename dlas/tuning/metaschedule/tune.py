"""Tune a model's tasks with MetaSchedule and apply the best schedules (the compile hook).

A point's tasks are tuned in one MetaSchedule session: one builder pool, one runner (the
model's real CSR arrays passed to each CSR task's candidates, picked by argument
signature), and MetaSchedule's gradient task scheduler (Ansor's), which spends the
point's `trials` where the point's weighted latency gains most, at most
`trials_per_task` on one task. Each task keeps its own search space (the sparse one for
CSR kernels), its own early stop and its ledger entry, so an interrupted session
resumes with what each task lacks and a task tuned by any earlier point is reused.

Before any search, each task's minimal (untuned) schedule is measured and stored as one
more candidate (`minimal_candidate`), so a small budget never makes a point slower than
untuned; the report says per task which schedule was applied. The database is read once
per point and the schedules are applied from that same reading.
"""

from __future__ import annotations

import concurrent.futures
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.s_tir import meta_schedule as ms

from dlas import registry
from dlas.compiler.gpu_schedule import untuned_rules
from dlas.compiler.minimal_schedule import ConvScheduler
from dlas.targets.base import TargetSpec
from dlas.tuning.metaschedule.cost_model import ChanceRanking, session_cost_model
from dlas.tuning.metaschedule.database import TuningDatabase, workload_key
from dlas.tuning.metaschedule.measure import (
    ArgumentsRunner,
    EarlyStopping,
    RealArguments,
    SessionBudget,
    TaskProgress,
    TaskSearch,
    Timeouts,
    make_builder,
    make_runner,
    task_signature,
)
from dlas.tuning.metaschedule.minimal_candidate import ensure_minimals
from dlas.tuning.metaschedule.plan import (
    MIN_TASK_TRIALS,
    SessionPlan,
    TuningJob,
    allot_by_time,
    group_sessions,
    task_time,
)
from dlas.tuning.metaschedule.pooled_builder import PooledBuilder
from dlas.tuning.metaschedule.ray_builder import RayBuilder
from dlas.tuning.metaschedule.report import (
    Allocation,
    TaskReport,
    TransferMode,
    TuningReport,
    reused_report,
    with_source,
)
from dlas.tuning.metaschedule.search_strategy import breeds, evolutionary_search
from dlas.tuning.metaschedule.sparse_space import csr_space, gpu_csr_space
from dlas.tuning.metaschedule.tasks import Task, conv_specs, extract
from dlas.tuning.metaschedule.transfer import (
    measure_transfers,
    source_structures,
    structure_key,
)
from dlas.tuning.metaschedule.vector_space import vector_space

log = logging.getLogger(__name__)

#: Threads of MetaSchedule's search strategy (a TuneContext's `num_threads`, not its
#: builder's, a pool of processes, nor its runner's) in a session ranked by chance
#: (`cost_model.ChanceRanking`: up to 100 trials, the quickstart's 64). The evolutionary
#: search samples and mutates its population in TVM's `parallel_for_dynamic`, each thread
#: drawing from its own random state, so which candidate a draw makes depends on how the
#: threads were scheduled: with two threads, one seed gave a different first batch in every
#: run (three fresh 16x16 quickstarts on a Zen 4 shared 1-5 of each task's 16-33 candidates;
#: their tuned GEMM read 2.13, 2.46 and 2.49 ms, and observation XI was held in one and not
#: in the others). On one thread the seed decides each task's first batch, and so the
#: whole search of a session that gives each task one batch (the quickstart's); later
#: batches breed from the best measured candidates, so near-ties in the timing can still
#: steer them, as they can choose between two measured candidates. It costs the
#: quickstart's tuned point 3-4 s (a first batch of 32 for its largest GEMM task: 2.34 s to
#: draw on one thread, 1.24 s on two). A session whose cost model predicts follows its
#: measurements once it does, which no seed fixes, and draws from a population of 512 by
#: default, 21.7 s a batch on one thread against 11.4 s on two: it keeps every builder
#: worker. So does a session for a GPU: there ~95% of random schedules fail the GPU's
#: limits (`VerifyGPUCode`), so drawing a batch is mostly rejecting samples. A batch of 32
#: for ResNet18-w0.5's largest GEMM task (16x16, sm_90) took 27-30 s to draw on one thread
#: against 11.2-11.6 s on two (this Zen 4), and the H200's tuned GEMM point (2026-11-30)
#: spent ~100 s of its 116 s tuning on two tasks' searches, on one thread of sixteen cores.
#: Its search is a draw of the threads as well as of the seed (docs/tuning.md).
SEARCH_THREADS = 1


def search_threads(cost_model: Any, workers: int, target: tvm.target.Target | None = None,
                   ) -> int:
    """The search strategy's threads in a session ranked by `cost_model` for `target` on a
    machine with `workers` builder workers (see `SEARCH_THREADS`)."""
    if target is not None and "gpu" in target.keys:
        return workers
    return SEARCH_THREADS if isinstance(cost_model, ChanceRanking) else workers


@dataclass
class TuningSettings:
    trials: int
    trials_per_task: int
    early_stopping: int | None
    trials_per_iter: int
    timeouts: Timeouts
    cost_model: str
    population: int
    seed: int
    builder_workers: int
    #: Tune only tasks holding a conv; the others keep their minimal schedule.
    only_convs: bool = False
    runner_repeat: int = 1
    runner_number: int = 3
    #: Transfer-tuning: "on" (replay matching tasks' schedules, then search), "only" (no
    #: search trials), "off".
    transfer: TransferMode = "on"
    #: Source workloads replayed per task.
    transfer_sources: int = 4
    #: How the point's trials are shared among its tasks: "time" (in proportion to each
    #: task's share of the model's time, measured: `allot_by_time`) or "flops" (the
    #: gradient scheduler's first round over the tasks, largest MACs first).
    allocation: Allocation = "time"


def _flops(task: Task) -> float:
    """Work of one call, to tune the costliest tasks first. TVM's estimate counts a CSR
    loop as 2**44 iterations; there it is 2 x non-zeros x output pixels per conv."""
    from tvm.s_tir.analysis import estimate_tir_flops

    if task.has_dynamic_loops:
        nnz = max((v.size for v in task.constants.values()
                   if np.issubdtype(v.dtype, np.floating)), default=0)
        return float(sum(2 * nnz * spec.out_shape[0] * spec.out_shape[2] * spec.out_shape[3]
                         for spec in conv_specs(task.mod)))
    try:
        return float(estimate_tir_flops(task.mod))
    except Exception:  # noqa: BLE001 - no estimate (e.g. data-dependent loops): last
        return 0.0


def _algorithms(names: set[str]) -> dict[str, Any]:
    """Each named conv algorithm, with default parameters."""
    options = {name: registry.get("algorithms", name) for name in names}
    return {name: option.fn(option.parse_params({})) for name, option in options.items()}


def _schedulers(names: set[str]) -> dict[str, ConvScheduler]:
    """Each named conv algorithm's CPU schedule."""
    return {name: algorithm.schedule for name, algorithm in _algorithms(names).items()}


def _vector_bits(target: tvm.target.Target) -> int:
    from dlas.tir.schedule_helpers import target_vector_bits

    with target:
        return target_vector_bits()


def _quiet_metaschedule() -> None:
    """MetaSchedule logs a full task table at INFO after every batch; ours is one line."""
    for name in ("tvm.s_tir.meta_schedule", "tvm.meta_schedule"):
        logging.getLogger(name).setLevel(logging.WARNING)


class MetaScheduleHook:
    """The compile hook: tune what the database lacks, then apply its best schedules."""

    def __init__(self, settings: TuningSettings, target: TargetSpec, db_dir: Path,
                 say: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.target = target
        self.db_dir = db_dir
        self.say = say or (lambda line: log.info("%s", line))
        self.report = TuningReport(database=str(db_dir))
        #: Optional `(task) -> space generator` replacing the default spaces (experiments
        #: with other spaces; tests use a space whose samples lose to the minimal one).
        self.space_for: Callable[[Task], Any] | None = None
        self._shared_runner: ms.runner.Runner | None = None
        self._runner_starting: concurrent.futures.Future[ms.runner.Runner] | None = None
        self._pooled_builder: PooledBuilder | RayBuilder | None = None

    def _builder(self) -> PooledBuilder | RayBuilder:
        """The point's one builder: its workers serve the minimal, transferred and
        searched candidates of every task (a pool start costs about 5 s here); inside a
        Ray task on a cluster, the cluster's other nodes build them."""
        if self._pooled_builder is None:
            s = self.settings
            self._pooled_builder = make_builder(s.timeouts, s.builder_workers)
            if isinstance(self._pooled_builder, RayBuilder):
                self.say("candidate builds fan out over the Ray cluster's other nodes")
        return self._pooled_builder

    def __call__(self, mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
        try:
            return self._tune_and_apply(mod, target)
        finally:
            if self._pooled_builder is not None:
                self._pooled_builder.close()
                self._pooled_builder = None

    def _tune_and_apply(self, mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
        from dlas._compat.tensor_intrin import register_for

        _quiet_metaschedule()
        start = time.perf_counter()
        register_for(target)  # not all of TVM's intrinsics: 100-180 s per process
        if self.target.rpc is not None:
            self._check_board()
        db = TuningDatabase(self.db_dir)  # read once for the whole point
        tasks = sorted(extract(mod, target), key=lambda t: -_flops(t) * t.weight)
        eligible: list[tuple[int, Task, str]] = []
        for i, task in enumerate(tasks, 1):
            kind = task.kind
            if self.settings.only_convs and not task.algorithms:
                self.report.tasks.append(TaskReport(
                    task.name, kind, "untuned", note="not a conv (tasks: convs)"))
                continue
            eligible.append((i, task, kind))
        cap = self.settings.trials_per_task
        reused: list[tuple[int, Task, str]] = []
        jobs: list[TuningJob] = []
        for i, task, kind in eligible:
            need = db.needs(task.mod, task.name, cap, self.settings.trials)
            if need == 0:
                reused.append((i, task, kind))
            else:
                jobs.append(TuningJob(i, task, kind, need))
        by_time = self.settings.allocation == "time" and self.settings.transfer != "only"
        # by time: planned once every task's time (minimal, or transferred) is measured
        sessions = [] if self.settings.transfer == "only" or by_time else [
            self._session_plan(session) for session in group_sessions(jobs)]
        transfer_todo = (self._transfer_todo(db, jobs) if self.settings.transfer != "off"
                         else [])
        # Minimal schedules are measured for the tasks whose schedule can change at this
        # point (searched, or offered transferred schedules), so neither can lose to it;
        # sharing the trials by time needs every task's.
        changing = {id(job) for job in transfer_todo}
        changing |= {id(job) for job in jobs} if by_time else {
            id(job) for plan in sessions for job in plan.reached}
        if jobs or transfer_todo:
            self._start_local_runner()
        minimal = self._minimals(db, [task for _, task, _ in reused] + [
            job.task for job in jobs if id(job) in changing], target)
        for job in jobs:  # a task not measured here keeps what an earlier point measured
            job.minimal_us, job.why = minimal.get(
                job.task.name, (db.entry(job.task.mod, job.task.name).minimal_us, ""))
        for _, task, kind in reused:
            minimal_us, why = minimal[task.name]
            report = reused_report(db, task, kind, why)
            self.report.tasks.append(with_source(report, minimal_us, db, task))
        transferred = self._transfer(db, transfer_todo, target)
        if by_time:
            sessions = [self._time_plan(db, session) for session in group_sessions(jobs)]
        if self.settings.transfer == "only":
            for job in jobs:
                self.report.tasks.append(with_source(
                    self._transfer_only_report(db, job, transferred), job.minimal_us, db,
                    job.task))
        for plan in sessions:
            reports = self._tune_session(db, plan, len(tasks), target) if plan.reached else []
            # Tasks the gradient scheduler's first round over the tasks (largest first)
            # cannot reach within the budget get no trials; they are booked as it would
            # book them, without building their search spaces.
            reports += [self._finish(db, job, TaskProgress(), plan.budget, 0, 0.0)
                        for job in plan.unreached]
            for job, report in zip(plan.reached + plan.unreached, reports, strict=True):
                if job.why:
                    report.note = "; ".join(n for n in (report.note, job.why) if n)
                report.transfer_candidates = transferred.get(job.task.name, 0)
                self.report.tasks.append(with_source(report, job.minimal_us, db, job.task))
        with target, db.database, tvm.transform.PassContext(opt_level=3):
            tuned = relax.transform.MetaScheduleApplyDatabase()(mod)
        self.report.seconds = time.perf_counter() - start
        transferred_tasks = self.report.count("transferred")
        self.say(f"tuning: {self.report.count('tuned')} tasks tuned, "
                 f"{self.report.count('reused')} reused from {self.db_dir.name}, "
                 + (f"{transferred_tasks} transferred, "
                    if transferred_tasks or self.settings.transfer == "only" else "") +
                 f"{self.report.count('untuned')} untuned, {self.report.trials} trials, "
                 f"{self.report.seconds:.0f}s")
        return tuned

    def _minimals(self, db: TuningDatabase, tasks: list[Task],
                  target: tvm.target.Target) -> dict[str, tuple[float | None, str]]:
        """The minimal schedules of `tasks` (those reused, searched or offered transfers at
        this point) measured into the database as candidates, once per workload: built in
        one batch, run by one runner per kind of arguments."""
        fresh = [t for t in tasks if db.entry(t.mod, t.name).minimal_us is None]
        if fresh:
            self.say(f"measuring the minimal schedules of {len(fresh)} task(s) as candidates")
        started = time.perf_counter()
        family = self.target.gpu_schedules

        def gpu_rules(task: Any) -> dict[str, Any] | None:
            return untuned_rules(family, _algorithms(task.algorithms).values())

        measured = ensure_minimals(
            db, tasks, lambda t: _schedulers(t.algorithms), target, _vector_bits(target),
            self._builder(), self._candidate_runner, gpu_rules) if tasks else {}
        if fresh:
            failed = [name for name, (us, _) in measured.items() if us is None]
            self.say(f"minimal schedules measured in {time.perf_counter() - started:.1f}s"
                     + (f"; not measured: {', '.join(failed)}" if failed else ""))
        return measured

    def _candidate_runner(self, task: Task) -> ms.runner.Runner:
        """The runner for candidates measured outside a session (minimal and transferred
        schedules): one worker for every task, each task with CSR arrays (or other
        integer constants) timed on its own values (`ArgumentsRunner`); on a board, a
        runner per such task."""
        s = self.settings
        values = task.index_constants()
        if values and self.target.rpc is not None:
            return make_runner(self.target, s.timeouts, RealArguments(values),
                               s.runner_repeat, s.runner_number)
        shared = self._local_runner()
        if not values:
            return shared
        return ArgumentsRunner(shared, RealArguments(values))

    def _start_local_runner(self) -> None:
        """Start the point's shared runner in the background: its worker is a process that
        imports TVM (2.3 s on a Zen 4, 4-5 s on a Zen 3), which used to start only once
        the minimal candidates were built, after the builder pool's own start."""
        if self._shared_runner is not None or self._runner_starting is not None:
            return
        s = self.settings
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dlas-runner")
        self._runner_starting = pool.submit(make_runner, self.target, s.timeouts, None,
                                            s.runner_repeat, s.runner_number)
        pool.shutdown(wait=False)

    def _local_runner(self) -> ms.runner.Runner:
        """The point's one runner for candidates without real arguments (started by
        `_start_local_runner`, or here): the minimal, transferred and searched candidates
        of every task share its worker."""
        if self._shared_runner is None:
            starting, self._runner_starting = self._runner_starting, None
            s = self.settings
            self._shared_runner = (starting.result() if starting is not None else make_runner(
                self.target, s.timeouts, None, s.runner_repeat, s.runner_number))
        return self._shared_runner

    def _transfer_todo(self, db: TuningDatabase, jobs: list[TuningJob]) -> list[TuningJob]:
        """The tasks transfer-tuning has something to offer: not yet offered, and with a
        structurally matching tuned workload in the database other than themselves."""
        sources = source_structures(db)
        return [job for job in jobs if not db.entry(job.task.mod, job.task.name).transfer_done
                and sources.get(structure_key(job.task.mod), set())
                - {workload_key(job.task.mod)}]

    def _transfer(self, db: TuningDatabase, todo: list[TuningJob],
                  target: tvm.target.Target) -> dict[str, int]:
        """Transfer-tuning before the search: each task's structurally matching tuned
        workloads' best schedules replayed on it, measured and committed (`transfer`)."""
        s = self.settings
        if not todo:
            return {}
        started = time.perf_counter()
        pairs = []
        for job in todo:
            ctx = ms.TuneContext(mod=job.task.mod, target=target,
                                 space_generator=self._space(job.task, job.kind, target),
                                 task_name=job.task.name, rand_state=s.seed,
                                 num_threads=s.builder_workers)
            pairs.append((job.task, list(ctx.space_generator.postprocs or [])))
        counts = measure_transfers(db, pairs, target, self._builder(),
                                   self._candidate_runner, s.transfer_sources)
        measured = sum(counts.values())
        self.say(f"transfer: {measured} schedule(s) of matching tuned tasks measured on "
                 f"{sum(n > 0 for n in counts.values())}/{len(todo)} task(s) in "
                 f"{time.perf_counter() - started:.1f}s")
        return counts

    def _transfer_only_report(self, db: TuningDatabase, job: TuningJob,
                              transferred: dict[str, int]) -> TaskReport:
        """A task given no search trials (`transfer: only`): its best transferred schedule
        (if any beat its minimal one) is what applies; the task stays open for a later
        point that searches it."""
        entry = db.entry(job.task.mod, job.task.name)
        measured = transferred.get(job.task.name, 0)
        if not entry.transferred:
            return TaskReport(job.task.name, job.kind, "untuned", note="transfer only: no "
                              "structurally matching tuned task in the database")
        return TaskReport(job.task.name, job.kind, "transferred",
                          best_us=db.best_us(job.task.mod), transfer_candidates=measured,
                          ended_by="transfer_only")

    def _check_board(self) -> None:
        """Fail the point with the tracker's own story (unreachable, no free board) before
        tuning, rather than as a failed build/run for every candidate."""
        from dlas.measure.session import request_session

        session = request_session(self.target.rpc)
        del session  # closes it: the runner opens its own per candidate batch

    def _space(self, task: Task, kind: str, target: tvm.target.Target) -> Any:
        if self.space_for is not None:
            return self.space_for(task)
        if kind == "sparse" and target.kind.name == "cuda":
            return gpu_csr_space(target)
        if kind == "sparse":
            return csr_space(_schedulers(task.algorithms), target, _vector_bits(target))
        if kind == "vector":
            return vector_space(_schedulers(task.algorithms), target, _vector_bits(target))
        return "post-order-apply"

    def _session_plan(self, jobs: list[TuningJob]) -> SessionPlan:
        """A session's budget and batch, and which of its tasks the gradient scheduler's
        first round (one batch per task, in order) reaches before the budget is spent."""
        budget = min(self.settings.trials, sum(job.need for job in jobs))
        per_iter = min(self.settings.trials_per_iter, max(job.need for job in jobs))
        reached: list[TuningJob] = []
        left = budget
        for job in jobs:
            if left <= 0:
                break
            reached.append(job)
            left -= min(per_iter, job.need)
        return SessionPlan(budget, per_iter, reached, jobs[len(reached):])

    def _time_plan(self, db: TuningDatabase, jobs: list[TuningJob]) -> SessionPlan:
        """A session whose trials are shared by time (`allot_by_time`): each task's time is
        its calls x the best schedule measured for it so far (minimal, transferred or
        searched), so a task that a transferred schedule already made fast gets few trials
        (transfer-tuning's "small search") and a slow memory-bound one (a depthwise conv:
        few MACs, much time) gets many. A task whose time could not be measured counts as
        the median task."""
        s = self.settings
        times = [task_time(db, job) for job in jobs]
        known = sorted(t for t in times if t is not None)
        median = known[len(known) // 2] if known else 1.0
        times = [t if t is not None else median for t in times]
        budget = min(s.trials, sum(job.need for job in jobs))
        allotted = allot_by_time(times, [job.need for job in jobs], budget, MIN_TASK_TRIALS)
        order = sorted(range(len(jobs)), key=lambda i: -times[i])
        reached = [jobs[i] for i in order if allotted[i] > 0]
        unreached = [jobs[i] for i in order if allotted[i] == 0]
        for i in order:
            jobs[i].need = allotted[i] or jobs[i].need
        shares = ", ".join(f"{job.task.name} {job.need}" for job in reached)
        if reached:
            self.say(f"trials by each task's share of the model's time: {shares}"
                     + (f"; {len(unreached)} task(s) too small for {MIN_TASK_TRIALS} trials"
                        if unreached else ""))
        # each task's batches are cut to its allotment (`TaskSearch`), so the first round
        # reaches every task given trials without smaller batches (a batch costs a search
        # step: ResNet18 w0.5's 256 trials took 688 s in batches of 17, 353 s in 64s)
        return SessionPlan(sum(job.need for job in reached), s.trials_per_iter, reached,
                            unreached)

    def _tune_session(self, db: TuningDatabase, plan: SessionPlan, n_tasks: int,
                      target: tvm.target.Target) -> list[TaskReport]:
        """Tune the plan's reached jobs in one MetaSchedule run: one builder, one runner
        (each task's real CSR arrays picked by its argument signature), and MetaSchedule's
        gradient task scheduler (Ansor's), which after one round over the tasks, largest
        first, gives each next batch to the task whose tuning most reduces the point's
        weighted latency. The point's budget is `trials`, each task's at most what it
        lacks of `trials_per_task`."""
        s = self.settings
        jobs, budget, per_iter = plan.reached, plan.budget, plan.per_iter
        progress = [TaskProgress() for _ in jobs]
        names = ", ".join(job.task.name for job in jobs)
        cost_model, ranking = session_cost_model(s.cost_model, budget, s.seed)
        breed = breeds(cost_model, [job.need for job in jobs], per_iter)
        if not breed:
            ranking = "; ".join(filter(None, (ranking, "one batch per task, drawn without "
                                                       "breeding")))
        self.say(f"tuning {len(jobs)} task(s) in one session, {budget} trials"
                 + (f" ({ranking})" if ranking else "") + f": {names}")
        started = time.monotonic()

        def report(task_id: int, p: TaskProgress) -> None:
            job = jobs[task_id]
            best = f"{p.best_us:.1f} us" if p.best_us is not None else "none yet"
            spent = sum(q.trials for q in progress)
            rate = spent / max(time.monotonic() - started, 1e-9)
            self.say(f"tuning {spent}/{budget} trials ({rate:.2f} trials/s); task "
                     f"{job.index}/{n_tasks} {job.task.name} ({job.kind}): {p.trials} "
                     f"trials, best so far {best}"
                     + (f", {p.errors} failed" if p.errors else ""))

        alloc = RealArguments(by_signature={
            task_signature(job.task.mod): job.task.index_constants()
            for job in jobs if job.task.index_constants()})
        strategy = evolutionary_search(s.population, breed)
        threads = search_threads(cost_model, s.builder_workers, target)
        shared = SessionBudget(budget)
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="dlas-ms-") as work:
            contexts = [ms.TuneContext(mod=job.task.mod, target=target,
                                       space_generator=self._space(job.task, job.kind, target),
                                       search_strategy=TaskSearch(strategy.clone(), job.need, p,
                                                                  shared),
                                       task_name=job.task.name,
                                       rand_state=s.seed, num_threads=threads,
                                       logger=ms.logging.get_logger("tvm.s_tir.meta_schedule"))
                        for job, p in zip(jobs, progress, strict=True)]
            callbacks = [*ms.measure_callback.MeasureCallback.create("default"),
                         EarlyStopping(s.early_stopping, progress, report)]
            try:
                ms.tune_tasks(
                    tasks=contexts, task_weights=[float(job.task.weight) for job in jobs],
                    work_dir=work, max_trials_global=budget,
                    max_trials_per_task=max(job.need for job in jobs),
                    num_trials_per_iter=per_iter,
                    builder=self._builder(),
                    # the point's runner worker when no task needs real arguments; a
                    # session's runs overlap its builds, so a borrowed allocator
                    # (`ArgumentsRunner`) would not be safe: CSR tasks get their own
                    runner=(make_runner(self.target, s.timeouts,
                                        alloc if alloc.by_signature else None,
                                        s.runner_repeat, s.runner_number)
                            if alloc.by_signature or self.target.rpc is not None
                            else self._local_runner()),
                    database=db.database, cost_model=cost_model,
                    measure_callbacks=callbacks,
                    task_scheduler=ms.task_scheduler.GradientBased(seed=s.seed)
                    if len(jobs) > 1 else "round-robin")
            except KeyboardInterrupt:
                for job in jobs:
                    entry = db.entry(job.task.mod, job.task.name)
                    entry.trials = max(entry.trials, db.measured_trials(job.task.mod))
                db.save()
                raise
        seconds = time.perf_counter() - started
        spent = sum(p.trials for p in progress)
        return [self._finish(db, job, p, budget, spent, seconds * p.trials / max(spent, 1))
                for job, p in zip(jobs, progress, strict=True)]

    def _finish(self, db: TuningDatabase, job: TuningJob, p: TaskProgress, budget: int,
                spent: int, seconds: float) -> TaskReport:
        """Book one task of a finished session in the ledger and say how it went."""
        task, kind = job.task, job.kind
        entry = db.entry(task.mod, task.name)
        entry.point_budget = max(entry.point_budget, self.settings.trials)
        if p.trials == 0:  # the point's budget went to tasks where it gained more
            entry.requested = max(entry.requested, self.settings.trials_per_task)
            entry.complete, entry.ended_by = True, "scheduler"
            db.save()
            note = ("the point's trial budget went to tasks whose tuning gained more "
                    "(gradient scheduler)")
            if entry.transferred:  # transferred schedules of this or an earlier point
                return TaskReport(task.name, kind, "transferred", ended_by="scheduler",
                                  best_us=db.best_us(task.mod),
                                  note=f"{note}; transferred schedules measured")
            return TaskReport(task.name, kind, "untuned", ended_by="scheduler", note=note)
        ended_by = ("early_stop" if p.stopped_early else
                    "budget" if p.trials >= job.need else
                    "scheduler" if spent >= budget else "space_exhausted")
        entry.trials = max(entry.trials + p.trials, db.measured_trials(task.mod))
        entry.requested = max(entry.requested, self.settings.trials_per_task)
        entry.complete, entry.ended_by = True, ended_by
        entry.best_us = db.best_us(task.mod)
        entry.tuning_s += seconds
        db.save()
        if p.best_us is None and db.measured_trials(task.mod) == 0:
            # nothing searched ran (the minimal schedule, if measured, is what applies)
            note = f"no candidate built and ran: {p.last_error}".strip()
            entry.complete = False
            db.save()
            return TaskReport(task.name, kind, "failed", trials=p.trials,
                              seconds=seconds, ended_by=ended_by, note=note)
        return TaskReport(task.name, kind, "tuned", trials=p.trials,
                          best_us=entry.best_us, seconds=seconds, ended_by=ended_by)
