"""Timing groups: the variants of one model timed together in a fresh worker process.

Why a separate process: a timing must not depend on what the process taking it did
before (trained a model, compiled, left PyTorch's or TVM's thread pools running). The
worker (`dlas.runner.timing_worker`) starts clean, with its threads pinned one per CPU
(TVM's pool, ONNX Runtime's and PyTorch's OpenMP threads alike). Why together: the
variants of one model (algorithms, compressions, tuned and not, the baseline runtimes)
are compared with each other, and on these VMs the vCPUs' placement flips every few
seconds to minutes; timed round-robin in the same rounds, a flip hits all of them alike
and each round says which placement it was taken in (`dlas.measure.rounds`,
docs/timing.md).

A group is the timing entries (`measure`, `baseline`) of the points sharing dataset,
model and target. The executor claims the entries, holds the machine exclusively, and
calls `time_group`; the worker's facts come back per member. A worker that dies (a
crashing kernel) fails the member it was running, and the others are timed again
without it. Ctrl-C or SIGTERM stop the worker with the sweep.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas.measure.stopping import WARMUP_S, RoundsPolicy
from dlas.runner.worker_starts import (
    WorkerStarts,
    hand_request,
    stop,
    worker_env,
)
from dlas.stages.keys import StageKeys
from dlas.sweep.grid import Point, digest


@dataclass
class TimingMember:
    """One timing entry of a group, as the worker needs it."""

    point: Point
    keys: StageKeys
    #: "measure" or "baseline".
    stage: str
    label: str
    #: The entry's folder being written (the baseline's ONNX file goes there).
    work_dir: str


@dataclass
class TimingRequest:
    """What the worker is asked to do (pickled to a file for it)."""

    workspace_root: str
    cache_dir: str
    members: list[TimingMember]
    policy: RoundsPolicy
    threads: int | None
    #: CPUs threads are pinned to, one per thread (None: not pinned).
    cpus: list[int] | None
    #: No variant's threads span CPUs (one thread, or a GPU).
    single: bool
    #: Probe the vCPUs' placement (local CPU, more than one thread).
    probe_placement: bool
    source: str = "sweep"
    seed: int = 0
    #: "time" (the members' timing entries) or "profile" (their per-layer profiles,
    #: `dlas.runner.profile_worker`).
    mode: str = "time"


@dataclass
class MemberResult:
    """The worker's answer for one member: the entry's meta, or why it failed."""

    meta: dict[str, Any] | None = None
    error: str | None = None
    traceback: str | None = None


def group_key(point: Point) -> str:
    """Points whose timing entries are timed together: same dataset, model and target."""
    return digest({layer: point.choices[layer].identity()
                   for layer in ("datasets", "models", "targets")})


def group_title(point: Point) -> str:
    return f"{point.models.label} on {point.datasets.label}, {point.targets.label}"


#: Rounds one timing pass takes at least: fewer leave a pass's figure to a handful of
#: chunks, and the first rounds of a run are the ones taken while the placement settles
#: (docs/timing.md: passes cut to their first 3 rounds brought the worst cases back).
MIN_ROUNDS_PER_PASS = 4


def rounds_policy(point: Point, passes: int | None = None) -> RoundsPolicy:
    """One timing run's rounds: the point's budgets (rounds, samples, placement wait)
    shared by its `timing_passes` (or `passes`: 1 for a run that is the only one, a
    profile), so that three passes minutes apart cost little more than one long run and
    agree better across invocations (docs/timing.md)."""
    b = point.budgets
    passes = passes or b.timing_passes
    return RoundsPolicy(samples=math.ceil(b.measure_repeat / passes),
                        min_rounds=max(min(MIN_ROUNDS_PER_PASS, b.timing_rounds),
                                       math.ceil(b.timing_rounds / passes)),
                        placement_budget_s=b.placement_wait_s / passes,
                        noise_retries=b.noise_retries, noise_budget_s=b.noise_budget_s,
                        warmup=b.warmup, warmup_s=WARMUP_S)


def plan_threads(point: Point) -> tuple[int | None, list[int] | None, bool, bool]:
    """(threads, CPUs to pin them to, single, probe placement) for a group's target."""
    from dlas.measure.vm_timing import pinnable_cpus
    from dlas.targets.host import available_cores
    from dlas.targets.resolve import resolve_target

    target = resolve_target(point)
    if target.rpc is not None:  # a board: nothing on this machine to pin or probe
        return target.num_threads, None, False, False
    if target.device != "cpu":  # a GPU: one host thread launches the kernels
        return target.num_threads, pinnable_cpus(1), True, False
    threads = target.num_threads or available_cores()
    cpus = pinnable_cpus(threads)
    return threads, cpus, threads == 1, threads > 1


def group_request(first: Point, members: list[TimingMember], workspace_root: str,
                  cache_dir: str, source: str, mode: str = "time") -> TimingRequest:
    """The request for one timing group, its threads and rounds planned from its first
    point (the same for every member): the one place a sweep's timing and a profile
    build it."""
    threads, cpus, single, probe = plan_threads(first)
    return TimingRequest(
        workspace_root=workspace_root, cache_dir=cache_dir, members=members,
        # a profile is one run, not a pass: the whole budgets
        policy=rounds_policy(first, 1 if mode == "profile" else None), threads=threads,
        cpus=cpus, single=single,
        probe_placement=probe, source=source, seed=first.budgets.seed, mode=mode)


class WorkerDied(RuntimeError):
    """The worker ended without results (a crash in native code, a kill)."""

    def __init__(self, code: int, label: str | None) -> None:
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        if code == -signal.SIGILL:
            how += ": an illegal instruction, code built for a CPU feature this one lacks"
        while_ = f" while running '{label}'" if label else ""
        super().__init__(f"the timing worker died ({how}){while_}")
        self.code, self.label = code, label


@dataclass
class WorkerEvents:
    """What the parent does with the worker's progress lines."""

    note: Callable[[str], None]
    round: Callable[[int, str, float | None], None] = lambda i, state, rt: None
    #: The member the worker is building or verifying (None: all built).
    active: str | None = None
    seen: list[dict[str, Any]] = field(default_factory=list)

    def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "subject":
            self.active = event.get("label")
        elif kind == "note":
            self.note(str(event.get("text")))
        elif kind == "round":
            self.round(int(event["i"]), str(event["placement"]), event.get("rt_ns"))
        elif kind == "verified" and not event.get("passed"):
            self.note(f"{event.get('label')}: output differs from the reference; not timed")


def run_worker(request: TimingRequest, events: WorkerEvents, python: str | None = None,
               starts: WorkerStarts | None = None) -> list[MemberResult]:
    """Run a worker on `request` and return its per-member results. `starts`: the run's
    workers (`dlas.runner.worker_starts`: a spare that imported beside an earlier worker,
    if one waits); None: a fresh worker with no spare."""
    import cloudpickle

    starts = starts if starts is not None else WorkerStarts()
    with tempfile.TemporaryDirectory(prefix="dlas-timing-") as tmp:
        req_path, out_path = Path(tmp) / "request.pkl", Path(tmp) / "result.json"
        req_path.write_bytes(cloudpickle.dumps(request))
        proc = starts.worker(python or sys.executable, worker_env(request.threads))
        try:
            hand_request(proc, req_path, out_path)  # if it died, its exit code says so
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.strip()
                if not line.startswith("{"):
                    continue  # a runtime printing on its own
                try:
                    events.handle(json.loads(line))
                except (ValueError, KeyError):
                    continue
            code = proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM (as KeyboardInterrupt), anything
            stop(proc)
            raise
        if code != 0 or not out_path.exists():
            if code == 130:
                raise KeyboardInterrupt
            raise WorkerDied(code, events.active)
        raw = json.loads(out_path.read_text())
    return [MemberResult(meta=r.get("facts"), error=r.get("error"),
                         traceback=r.get("traceback")) for r in raw]


def time_group(request: TimingRequest, events: WorkerEvents,
               starts: WorkerStarts | None = None) -> list[MemberResult]:
    """Time the request's members (in a worker from `starts`, see `run_worker`); a member
    the worker died on fails, the rest are timed again without it."""
    members = list(request.members)
    results: dict[str, MemberResult] = {}
    while members:
        attempt = TimingRequest(**{**request.__dict__, "members": members})
        try:
            got = run_worker(attempt, events, starts=starts)
            for member, result in zip(members, got, strict=True):
                results[member.label] = result
            break
        except WorkerDied as died:
            culprit = died.label if died.label in {m.label for m in members} else None
            if culprit is None:  # not while building one member: all of them failed
                for member in members:
                    results[member.label] = MemberResult(error=str(died))
                break
            results[culprit] = MemberResult(error=str(died))
            events.note(f"{died}; timing the other variants again without it")
            members = [m for m in members if m.label != culprit]
    return [results[m.label] for m in request.members]
