"""Run a sweep across a Ray cluster (`dlas run CONFIG --executor ray [--ray-address A]`).

The driver expands the sweep, finds the stage entries the cache lacks, and submits each
missing entry once as a Ray task, as soon as the entry it depends on exists; a task runs
the same stage code as the local executor (`dlas.runner.executor`) on a worker. Points
sharing a prefix share its tasks: one training feeds every compression.

- Resources: each task asks for its stage's CPUs (`Stage.resources`); a timing (measure,
  baseline, and a compile that tunes) asks for a whole node's CPUs, and on the node the
  machine lock (`dlas.runner.machine`) keeps anything else from running beside it.
- Storage: the workspace's cache must be one shared path on every node (NFS or the like);
  workers write entries there under claims (`dlas.runner.claims`), so several drivers and
  local runs on the same workspace still compute each entry once. Only the driver writes
  the SQLite results.
- Damage: an entry whose files differ from its manifest (`Cache.check`) is reported and
  submitted like a missing one; the task discards it under its claim and computes it.
- Security: the cluster dlas starts, and the driver joining one, use Ray's token
  authentication with the workspace's token, and a local cluster listens on loopback
  only (`dlas.runner.ray_auth`): an open Ray port runs any code sent to it.
- Failures: a stage that raises is a failed point (recorded, the sweep goes on); a worker
  or node lost mid-stage has its task retried by Ray (`max_retries`), and its claim dies
  with it. Ctrl-C cancels the running tasks; what finished is cached, and the same
  command resumes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import traceback
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlas import registry
from dlas.results.row import ResultRow
from dlas.runner import ray_auth
from dlas.runner.cache import Cache
from dlas.runner.claims import Claims
from dlas.runner.console import RunConsole
from dlas.runner.executor import StageExecutor, StageFailed
from dlas.runner.point_plan import PointPlan, complete_row
from dlas.runner.refused import ExecutorRefused
from dlas.runner.rows import failed_row, new_row, unmeasurable_row
from dlas.runner.sweep_executor import PlanExecutor, SweepRun
from dlas.runner.workspace import StageTally, Workspace
from dlas.stages import BY_NAME, STAGES, TIMED_STAGES, result_stage, stage_keys
from dlas.stages.base import StageEnv, StoredStage
from dlas.stages.facts import CompileFacts, MeasureFacts
from dlas.stages.keys import StageKeys
from dlas.sweep.grid import Point

#: Times Ray re-runs a task whose worker or node died (a stage that raises is not retried:
#: it is a result).
MAX_RETRIES = 3
#: Environment variables the driver passes to its workers (lock folder, thread count).
PASSED_ENV = ("DLAS_LOCK_DIR", "TVM_NUM_THREADS", "PYTHONPATH")


def _cancel(refs: list[Any]) -> None:
    """Force-cancel the tasks still running. Those already finished are left alone: Ray
    2.60's force-cancel of a task whose reply is arriving can abort the driver
    (task_manager.cc "Tried to complete task that was not pending", seen on Ctrl-C)."""
    import ray

    if not refs:
        return
    _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=0)
    for ref in unfinished:
        ray.cancel(ref, force=True)


class RayUnreachable(ExecutorRefused, ConnectionError):
    """The Ray cluster named by --ray-address cannot be reached."""


class RayRefused(RayUnreachable):
    """The Ray cluster named by --ray-address refused this driver's token."""


def _is_host_port(address: str) -> bool:
    """HOST:PORT (a GCS to check), not "auto", "local" or "ray://..." (left to Ray)."""
    _, sep, port = address.rpartition(":")
    return bool(sep) and port.isdigit() and "://" not in address


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on (ray.init would wait minutes); other
    forms ("auto", "local", "ray://...") are left to Ray."""
    if not _is_host_port(address):
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnreachable(
            f"--ray-address {address}: no Ray cluster answers there ({exc}); start its "
            "head with `ray start --head --port PORT` on that machine, with the "
            "workspace's token (docs/cluster.md), or leave --ray-address out to run on a "
            "new local Ray instance") from exc


@contextlib.contextmanager
def _keep_sigterm_handler() -> Iterator[None]:
    """`ray.init` makes SIGTERM `sys.exit` in the driver; keep a handler the command
    installed (`dlas.runner.signals`: SIGTERM stops a sweep like Ctrl-C, with its message
    and exit 130, and cancels the running tasks). Without one, Ray's stays (better than
    the default, which would skip `ray.shutdown`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class Node:
    """One stage entry the sweep needs."""

    stage: str
    key: str

    def __str__(self) -> str:
        return f"{self.stage} {self.key[:10]}"


@dataclass
class StageOutcome:
    """What a task reports back: the entry's facts, or why the stage failed."""

    meta: dict[str, Any] | None = None
    computed: bool = False
    seconds: float = 0.0
    host: str = ""
    error_stage: str | None = None
    error: str | None = None
    traceback: str | None = None


class _WorkerConsole(RunConsole):
    """A worker's console: what it computes and waits for (forwarded to the driver by
    Ray), not the upstream entries it merely finds stored."""

    def stage(self, name: str, state: str, key: str, seconds: float | None = None) -> None:
        if state not in ("reused", "loaded"):
            super().stage(name, state, key, seconds)


def run_stage_task(point: Point, stage: str, keys: StageKeys, workspace_root: str,
                   cache_dir: str) -> StageOutcome:
    """A Ray task's body: ensure one entry on this worker (its upstream is stored)."""
    registry.load_plugins()
    local_keys = stage_keys(point)
    if local_keys != keys:
        differs = [s for (s, k), (_, d) in zip(local_keys.items(), keys.items(), strict=False)
                   if k != d]
        return StageOutcome(error_stage=stage, host=socket.gethostname(), error=(
            f"this node ({socket.gethostname()}) gives the point other stage keys than the "
            f"driver ({', '.join(differs)}): its target or machine differs (a 'host' target "
            "resolves to each machine's CPU); use identical nodes, or name the target "
            "explicitly"))
    tally = StageTally()
    cache = Cache(Path(cache_dir))
    env = StageEnv(Path(workspace_root), _WorkerConsole(progress=False), progress=False)
    from dlas.runner.machine import MachineLock

    executor = StageExecutor(cache, env, tally, claims=Claims(cache.root),
                             machine=MachineLock())
    target = BY_NAME[stage]
    assert isinstance(target, StoredStage)
    try:
        facts = executor.facts(point, keys, target)
    except StageFailed as failure:
        return StageOutcome(error_stage=failure.stage, host=socket.gethostname(),
                            error=failure.message, traceback=failure.tb)
    return StageOutcome(meta=facts.to_meta(), computed=tally.computed[stage] > 0,
                        seconds=tally.seconds[stage], host=socket.gethostname())


def run_timing_group_task(members: list[tuple[Point, StageKeys]], workspace_root: str,
                          cache_dir: str, source: str = "sweep") -> list[StageOutcome]:
    """A Ray task's body: the timing entries of one model's variants, timed together in a
    timing worker on this node (`dlas.runner.timing_groups`)."""
    from dlas.runner.executor import EntryBusy
    from dlas.runner.machine import MachineLock
    from dlas.runner.timing_groups import group_title

    registry.load_plugins()
    host = socket.gethostname()
    for point, keys in members:
        if stage_keys(point) != keys:
            return [StageOutcome(error_stage="measure", host=host, error=(
                f"this node ({host}) gives the point other stage keys than the driver: "
                "its target or machine differs (a 'host' target resolves to each "
                "machine's CPU); use identical nodes, or name the target explicitly"))
                for _ in members]
    tally = StageTally()
    cache = Cache(Path(cache_dir))
    env = StageEnv(Path(workspace_root), _WorkerConsole(progress=False), progress=False)
    executor = StageExecutor(cache, env, tally, claims=Claims(cache.root),
                             machine=MachineLock(), wait_for_claims=False,
                             timing_source=source)
    outcomes = executor.timings(members, group_title(members[0][0]))
    executor.wait_for_claims = True  # what another process was timing: wait for it
    out = []
    for (point, keys), outcome in zip(members, outcomes, strict=True):
        stage = result_stage(point)
        if isinstance(outcome, EntryBusy):
            try:
                outcome = executor.facts(point, keys, stage)
            except StageFailed as failure:
                outcome = failure
        if isinstance(outcome, StageFailed):
            out.append(StageOutcome(error_stage=outcome.stage, host=host,
                                    error=outcome.message, traceback=outcome.tb))
            continue
        out.append(StageOutcome(meta=outcome.to_meta(), host=host,
                                computed=tally.computed[stage.name] > 0,
                                seconds=outcome.seconds or 0.0))
    return out


@dataclass
class _PointState:
    plan: PointPlan
    #: Its stored stages' entries, root first.
    nodes: list[Node]
    row: ResultRow


class RayRunner(PlanExecutor):
    """The Ray executor: the local executor's outcome, with stages spread over a cluster."""

    def __init__(self, workspace: Workspace, *, address: str | None = None,
                 progress: bool = True, console: RunConsole | None = None) -> None:
        super().__init__(workspace, progress=progress, console=console)
        self.address = address
        #: How the driver authenticates to the cluster (`ray_auth.describe`).
        self._auth = ""

    # -- cluster --------------------------------------------------------------------

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:  # type: ignore[override]
        """Within: connected to the cluster, or to a new local Ray, with the workspace's
        token (`dlas.runner.ray_auth`); shut down on exit. A Ray this process already
        joined (tests, the benchmark) is used as it is."""
        import ray

        if ray.is_initialized():
            self._auth = "authentication as this process already set it up"
            yield
            return
        # no address: a new local instance ("local"), not whatever cluster Ray would find
        # in /tmp/ray/ray_current_cluster; RAY_ADDRESS or --ray-address auto join one
        address = self.address or os.environ.get("RAY_ADDRESS") or "local"
        check_reachable(address)
        with ray_auth.secured_ray(self.workspace.root,
                                  loopback=ray_auth.is_loopback(address)) as auth:
            self._auth = auth
            self._init(address)
            try:
                yield
            finally:
                ray.shutdown()

    def _init(self, address: str) -> None:
        """`ray.init`, after a quick check that the cluster accepts this driver's token
        (a refused `ray.init` retries for 20 s, then says only that it failed)."""
        import ray

        refusal = ray_auth.probe(address) if _is_host_port(address) else None
        if refusal is not None:
            raise RayRefused(self._refused_message(address, refusal))
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        here = str(Path.cwd())
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), here) if p)
        with _keep_sigterm_handler():
            ray.init(address=address, runtime_env={"env_vars": env},
                     include_dashboard=False, logging_level="WARNING",
                     configure_logging=True, log_to_driver=True)

    def _refused_message(self, address: str, refusal: ray_auth.Refusal) -> str:
        exports = "python -m dlas.runner.ray_auth --workspace " + str(self.workspace.root)
        return (f"--ray-address {address}: the cluster refused this driver ({refusal.reason}; "
                f"this driver: {refusal.auth}). Start every node of the cluster with the "
                f"workspace's token (`eval \"$({exports})\"` before `ray start`, "
                "docs/cluster.md), or set RAY_AUTH_TOKEN_PATH to the token the cluster uses")

    @staticmethod
    def _node_cpus() -> float:
        """CPUs a timing asks for: the smallest worker node's, so it holds a whole node."""
        import ray

        cpus = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
        cpus = [c for c in cpus if c > 0]
        return min(cpus) if cpus else 1.0

    # -- the sweep ------------------------------------------------------------------

    def opened(self) -> None:
        import ray

        resources = ray.cluster_resources()
        self.console.note(f"ray: {len([n for n in ray.nodes() if n.get('Alive')])} "
                          f"node(s), {resources.get('CPU', 0):g} CPUs; {self._auth}")

    def _entries(self, run: SweepRun, plans: list[PointPlan]
                 ) -> tuple[list[_PointState], dict[Node, _PointState],
                            dict[Node, Node | None], dict[Node, StageOutcome]]:
        """The sweep's stage entries: each point's state, every entry once (for its first
        point) with its parent entry, and the outcomes of those the cache already holds
        (a damaged one is said and submitted like a missing one; the task discards it)."""
        states = [_PointState(plan, [Node(s.name, plan.keys[s.name]) for s in plan.stored],
                              new_row(plan.point, run.name)) for plan in plans]
        needed: dict[Node, _PointState] = {}
        parent: dict[Node, Node | None] = {}
        for state in states:
            for before, node in zip([None, *state.nodes], state.nodes, strict=False):
                needed.setdefault(node, state)
                parent[node] = before
        outcome: dict[Node, StageOutcome] = {}
        for node in needed:
            check = self.cache.check(node.stage, node.key)
            if check.usable:
                outcome[node] = StageOutcome(meta=self.cache.meta(node.stage, node.key))
                self.report.reused[node.stage] += 1
            elif check.damaged:
                self.report.damaged[node.stage] += 1
                self.console.damaged(check)
        return states, needed, parent, outcome

    def walk(self, run: SweepRun, plans: list[PointPlan]) -> None:
        import ray

        states, needed, parent, outcome = self._entries(run, plans)
        remote = ray.remote(run_stage_task)
        remote_group = ray.remote(run_timing_group_task)
        timing_cpus = self._node_cpus()
        # timing entries go to the timing worker a model's variants at a time
        groups: dict[str, list[tuple[Node, _PointState]]] = defaultdict(list)
        for node, state in needed.items():
            if node.stage in TIMED_STAGES:
                groups[state.plan.group].append((node, state))
        group_refs: dict[Any, list[Node]] = {}
        running: dict[Any, Node] = {}
        submitted: set[Node] = set()
        pending_points = list(states)
        done_count, total = len(outcome), len(needed)
        try:
            while True:
                if not run.stopped:
                    for node, state in needed.items():
                        up = parent[node]
                        if node in outcome or node in submitted or node.stage in TIMED_STAGES:
                            continue
                        if up is not None and (up not in outcome or outcome[up].meta is None):
                            continue
                        stage = BY_NAME[node.stage]
                        res = stage.resources_for(state.plan.point)
                        cpus = timing_cpus if res.exclusive else min(res.cpus, timing_cpus)
                        ref = remote.options(num_cpus=cpus, max_retries=MAX_RETRIES,
                                             name=f"dlas {node}").remote(
                            state.plan.point, node.stage, state.plan.keys,
                            str(self.workspace.root),
                            str(self.workspace.cache_dir))
                        running[ref] = node
                        submitted.add(node)
                self._propagate_failures(needed, parent, outcome)
                if not run.stopped:
                    for members in groups.values():
                        todo = [(n, st) for n, st in members
                                if n not in outcome and n not in submitted]
                        upstream = [parent[n] for n, _ in todo]
                        if not todo or any(up is not None and up not in outcome
                                           for up in upstream):
                            continue  # a member's upstream is still being computed
                        ref = remote_group.options(
                            num_cpus=timing_cpus, max_retries=MAX_RETRIES,
                            name=f"dlas timing {len(todo)} variants").remote(
                            [(st.plan.point, st.plan.keys) for _, st in todo],
                            str(self.workspace.root), str(self.workspace.cache_dir),
                            self.timing_source)
                        group_refs[ref] = [n for n, _ in todo]
                        submitted.update(n for n, _ in todo)
                self._propagate_failures(needed, parent, outcome)
                for state in list(pending_points):
                    if self._finish_point(state, outcome, run):
                        pending_points.remove(state)
                        self.record(run, state.plan, state.row)
                if not running and not group_refs:
                    break
                ready, _ = ray.wait([*running, *group_refs], num_returns=1)
                for ref in ready:
                    if ref in group_refs:
                        nodes = group_refs.pop(ref)
                        try:
                            results: list[StageOutcome] = ray.get(ref)
                        except Exception as exc:  # noqa: BLE001 - retries spent, or cancelled
                            results = [StageOutcome(error_stage=n.stage,
                                                    error=f"{type(exc).__name__}: {exc}",
                                                    traceback=traceback.format_exc())
                                       for n in nodes]
                        for node, result in zip(nodes, results, strict=True):
                            outcome[node] = result
                            done_count += 1
                            self._tally(node, result, done_count, total)
                        continue
                    node = running.pop(ref)
                    try:
                        result: StageOutcome = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - retries spent, or cancelled
                        result = StageOutcome(error_stage=node.stage,
                                              error=f"{type(exc).__name__}: {exc}",
                                              traceback=traceback.format_exc())
                    outcome[node] = result
                    done_count += 1
                    self._tally(node, result, done_count, total)
                if run.stopped:
                    _cancel([*running, *group_refs])
                    running.clear()
                    group_refs.clear()
        except KeyboardInterrupt:
            _cancel([*running, *group_refs])
            raise

    def _tally(self, node: Node, result: StageOutcome, done: int, total: int) -> None:
        report = self.report
        where = f" on {result.host}" if result.host else ""
        if result.meta is None:
            self.console.note(f"  [{done}/{total}] {node} [red]failed[/]{where}: {result.error}")
        elif result.computed:
            report.computed[node.stage] += 1
            report.seconds[node.stage] += result.seconds
            self.console.note(f"  [{done}/{total}] {node} computed{where} in "
                              f"{result.seconds:.1f}s")
        else:
            report.reused[node.stage] += 1
            self.console.note(f"  [{done}/{total}] {node} reused{where}")

    @staticmethod
    def _propagate_failures(needed: dict[Node, _PointState], parent: dict[Node, Node | None],
                            outcome: dict[Node, StageOutcome]) -> None:
        """An entry whose upstream failed fails with it, never submitted."""
        changed = True
        while changed:
            changed = False
            for node in needed:
                up = parent[node]
                if node in outcome or up is None or up not in outcome:
                    continue
                if outcome[up].meta is None:
                    outcome[node] = outcome[up]
                    changed = True

    def _finish_point(self, state: _PointState, outcome: dict[Node, StageOutcome],
                      run: SweepRun) -> bool:
        """Fill the point's row once all its entries are known; False while some run."""
        if not all(node in outcome for node in state.nodes):
            return False
        row, plan = state.row, state.plan
        seconds: defaultdict[str, float] = defaultdict(float)
        for node in state.nodes:
            result = outcome[node]
            if result.computed:
                seconds[node.stage] += result.seconds
        row.stage_seconds = {s: seconds[s] for s in STAGES}
        failed = next((outcome[n] for n in state.nodes if outcome[n].meta is None), None)
        if failed is not None:
            failed_row(row, failed.error_stage, failed.error, failed.traceback)
            return True
        facts = {n.stage: BY_NAME[n.stage].read_facts(outcome[n].meta)  # type: ignore[attr-defined]
                 for n in state.nodes}
        if plan.timed is None:  # compiled and cached; nothing here can run it
            compiled = facts[plan.prepared[-1].name]
            assert isinstance(compiled, CompileFacts)
            unmeasurable_row(row, plan.unmeasurable, compiled)
            return True
        measured = facts[plan.timed.name]
        assert isinstance(measured, MeasureFacts)
        complete_row(run.store, plan, row, facts, measured)
        return True
