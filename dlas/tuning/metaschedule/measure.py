"""How MetaSchedule measures candidates: builder, runner (local or a board over RPC),
the model's real CSR arrays as arguments, early stopping and progress."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerInput
from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

from dlas.measure.vm_timing import set_num_threads
from dlas.targets.base import TargetSpec
from dlas.targets.host import available_cores
from dlas.tuning.metaschedule.pooled_builder import PooledBuilder
from dlas.tuning.metaschedule.ray_builder import RayBuilder


def args_signature(args_info: Any) -> str:
    """A candidate's argument kinds, dtypes and shapes as one string: how the runner's
    allocator tells the tasks of one tuning session apart (it is given nothing else)."""
    return json.dumps([[str(kind), str(dtype), [int(d) for d in shape]]
                       for kind, dtype, shape in args_info])


def task_signature(mod: Any) -> str:
    """`args_signature` of a task's PrimFunc, as its candidates will be allocated."""
    return args_signature([info.as_json() for info in
                           ms.arg_info.ArgInfo.from_prim_func(mod["main"])])


class RealArguments:
    """`f_alloc_argument` for the runner: random tensors, except the arguments whose real
    values are given (a CSR kernel's data/indices/indptr), which are copied in.

    One session tunes all tasks of a point through one runner, so the values are keyed
    by the candidate's `args_signature` (`by_signature`); `values` applies to every
    candidate (a runner of one task). Tasks whose real values differ but whose signatures
    are equal cannot share a runner: `tune` puts them in separate sessions.

    Pickled into MetaSchedule's runner worker (local) or called with an RPC session
    (remote); both signatures end in (device, args_info, alloc_repeat).
    """

    def __init__(self, values: dict[int, np.ndarray] | None = None,
                 by_signature: dict[str, dict[int, np.ndarray]] | None = None) -> None:
        self.values = values or {}
        self.by_signature = by_signature or {}

    def __call__(self, *args: Any) -> list[list[Any]]:
        from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common
        from tvm_ffi import get_global_func

        device, args_info, alloc_repeat = args[-3:]
        session = args[0] if len(args) == 4 else None
        name = "tvm.contrib.random.random_fill_for_measure"
        fill = session.get_function(name) if session is not None else get_global_func(
            name, allow_missing=True)
        repeated = alloc_argument_common(fill, device, args_info, alloc_repeat)
        values = self.values
        if self.by_signature:
            values = {**values, **self.by_signature.get(args_signature(args_info), {})}
        for arguments in repeated:
            for index, value in values.items():
                arguments[index].copyfrom(np.ascontiguousarray(value))
        return repeated


@dataclass
class Timeouts:
    #: One candidate's build (LLVM on a slow 2-core machine takes tens of seconds).
    builder_s: float
    #: One candidate's measurement, including loading it.
    runner_s: float


def make_builder(timeouts: Timeouts, workers: int) -> PooledBuilder | RayBuilder:
    """Local build workers that skip TVM's tensor-intrinsic import (`build_worker`) and
    live across batches (`PooledBuilder`), or, in a Ray task on a cluster with other
    nodes, builds fanned out over the cluster (`RayBuilder`); `close()` it when the point
    is done."""
    from dlas.tuning.metaschedule.build_worker import build_candidate
    from dlas.tuning.metaschedule.ray_builder import fan_out_possible

    if fan_out_possible():
        return RayBuilder(f_build=build_candidate, timeout_sec=timeouts.builder_s)

    return PooledBuilder(max_workers=workers, timeout_sec=timeouts.builder_s,
                         f_build=build_candidate)


def make_runner(target: TargetSpec, timeouts: Timeouts, alloc: RealArguments | None,
                repeat: int, number: int) -> ms.runner.Runner:
    """A runner on this machine, or on the target's board through its RPC tracker;
    `alloc` passes real argument values (CSR arrays), None random ones."""
    evaluator = ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=50,
                                          enable_cpu_cache_flush=False)
    if target.rpc is not None:
        rpc = ms.runner.RPCConfig(tracker_host=target.rpc.host, tracker_port=target.rpc.port,
                                  tracker_key=target.rpc.key, session_priority=1,
                                  session_timeout_sec=int(max(timeouts.runner_s, 10)))
        return ms.runner.RPCRunner(rpc_config=rpc, evaluator_config=evaluator,
                                   max_workers=1, f_alloc_argument=alloc)
    # The runner's worker times candidates with the point's thread count (the runner's
    # rule: the target's threads, else every available core). TVM's pool in a fresh
    # process has one thread on these 2-vCPU machines (unless TVM_NUM_THREADS happens to
    # be set), and a schedule searched single-threaded loses its gain, or turns into a
    # loss, when the point is timed with two.
    threads = functools.partial(set_num_threads, target.num_threads or available_cores())
    return ms.runner.LocalRunner(timeout_sec=timeouts.runner_s, evaluator_config=evaluator,
                                 f_alloc_argument=alloc, initializer=threads)


@derived_object
class ArgumentsRunner(PyRunner):
    """A task's runner on a shared `LocalRunner`'s worker process, with the task's own
    argument values (`RealArguments`).

    Why: a `LocalRunner` starts a worker process that imports TVM when it is made (4-5 s
    on a 2-core Zen 3), and the minimal and transferred candidates of a point took one
    per task with real arguments: an int8 ResNet's 7 tasks, 31 s of a 4-trial tuned
    point, and every task of a CSR model. `LocalRunner.run` hands its allocator to the
    worker with each candidate, so one worker serves every task: this view lends the
    shared runner its allocator for the length of one (synchronous) `run`.
    """

    def __init__(self, shared: ms.runner.LocalRunner, alloc: RealArguments) -> None:
        super().__init__()
        self.shared = shared
        self.alloc = alloc

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        inner = self.shared._inst  # noqa: SLF001 - the Python object behind TVM's wrapper
        lent = inner.f_alloc_argument
        inner.f_alloc_argument = self.alloc
        try:
            return inner.run(runner_inputs)
        finally:
            inner.f_alloc_argument = lent


@dataclass
class TaskProgress:
    """What the callback saw of one task of a tuning session."""

    trials: int = 0
    errors: int = 0
    best_us: float | None = None
    since_best: int = 0
    stopped_early: bool = False
    last_error: str = ""
    started: float = field(default_factory=time.perf_counter)

    def record(self, seconds: list[float | None], patience: int | None,
               error: str = "") -> bool:
        """Count measured candidates (mean seconds, None for one that failed); return
        True when `patience` trials in a row brought no better candidate."""
        for secs in seconds:
            self.trials += 1
            if secs is None:
                self.errors += 1
                self.last_error = error or self.last_error
                self.since_best += 1
            elif self.best_us is None or secs * 1e6 < self.best_us:
                self.best_us, self.since_best = secs * 1e6, 0
            else:
                self.since_best += 1
        return patience is not None and self.since_best >= patience


@derived_object
class EarlyStopping(PyMeasureCallback):
    """Counts each task's measured candidates and marks it stopped after `patience`
    trials without a better one (the paper's "stop after 1,000 trials without
    improvement"; MetaSchedule has no such switch), and reports progress after every
    batch. The task ends at its next turn: `TaskSearch` then offers no candidates and
    the scheduler terminates it (terminating it here would be done twice when this runs
    inside the scheduler's final join)."""

    def __init__(self, patience: int | None, progress: list[TaskProgress],
                 report: Callable[[int, TaskProgress], None] | None = None) -> None:
        super().__init__()
        self.patience = patience
        self.progress = progress
        self.report = report

    def apply(self, task_scheduler: ms.TaskScheduler, task_id: int, measure_candidates: Any,
              builder_results: Any, runner_results: Any) -> None:
        p = self.progress[task_id]
        seconds: list[float | None] = []
        error = ""
        for built, ran in zip(builder_results, runner_results, strict=True):
            failed = built.error_msg or ran.error_msg
            if failed or not ran.run_secs:
                seconds.append(None)
                error = str(failed or "no timing")[:2000]
                continue
            secs = [float(s) for s in ran.run_secs]
            seconds.append(sum(secs) / len(secs))
        if p.record(seconds, self.patience, error):
            p.stopped_early = True
        if self.report is not None:
            self.report(task_id, p)


@dataclass
class SessionBudget:
    """Trials a tuning session has left to hand out (shared by its tasks' searches)."""

    left: int


@derived_object
class TaskSearch(PySearchStrategy):
    """One task's search in a session: MetaSchedule's strategy, with the task's own trial
    limit (MetaSchedule's `max_trials_per_task` is one number for all tasks, and a
    resumed task lacks fewer) and its early stop (no more candidates once `progress`
    says so)."""

    def __init__(self, inner: ms.search_strategy.SearchStrategy, limit: int,
                 progress: TaskProgress, budget: SessionBudget | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.limit = limit
        self.progress = progress
        self.budget = budget

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any,
                   database: Any = None, cost_model: Any = None) -> None:
        self.inner.pre_tuning(min(max_trials, self.limit), min(num_trials_per_iter, self.limit),
                              design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> Any:
        if self.progress.stopped_early:
            return None
        candidates = self.inner.generate_measure_candidates()
        if candidates is None or self.budget is None:
            return candidates
        # MetaSchedule checks its global budget before a batch, not within it: the last
        # batch is cut to what the session has left
        take = min(len(candidates), self.budget.left)
        if take <= 0:
            return None
        self.budget.left -= take
        return list(candidates)[:take]

    def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> Any:
        return TaskSearch(self.inner.clone(), self.limit, self.progress, self.budget)
