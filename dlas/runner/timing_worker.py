"""The timing worker's own process: `python -m dlas.runner.timing_worker REQUEST RESULT`,
or `--wait` to import first and read `[REQUEST, RESULT]` (one JSON line) from stdin
(`dlas.runner.worker_starts`).

It starts fresh, so no timing depends on what the sweep's process did before (trained,
compiled, left thread pools running), pins its threads as the request says, builds every
member's variant through its stage, verifies each, and times those that pass together,
round by round (`dlas.measure.rounds`). Progress goes to stdout as one JSON object per
line; the facts of every member go to RESULT. The parent side is `dlas.runner.timing_groups`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

Emit = Callable[..., None]


def _emitter() -> Emit:
    out = sys.stdout

    def emit(**event: Any) -> None:
        out.write(json.dumps(event, default=str) + "\n")
        out.flush()

    return emit


class _EventConsole:
    """The console the stages see in the worker: their notes become events."""

    progress = False

    def __init__(self, emit: Emit) -> None:
        self.emit = emit

    def note(self, text: str) -> None:
        self.emit(event="note", text=text)

    def stage(self, name: str, state: str, key: str, seconds: float | None = None) -> None:
        pass

    @contextmanager
    def activity(self, text: str) -> Iterator[None]:
        self.emit(event="activity", text=text)
        yield

    def epoch_reporter(self, what: str) -> None:
        return None


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}


def _thread_cpus() -> list[list[int]]:
    """The CPUs each thread of this process may run on (sorted lists, one per thread)."""
    out = []
    for tid in sorted(_threads()):
        try:
            out.append(sorted(os.sched_getaffinity(tid)))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def _cpu_ns(tid: int) -> int:
    """Nanoseconds thread `tid` of this process has run (schedstat; 0 once it is gone)."""
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


#: A parallel region long enough that every thread of OpenMP's team takes part in it
#: (a 512x512 float32 matmul: 0.27 GFLOP, a few ms on two cores).
_POOL_PROBE_SIDE = 512


def _start_openmp(threads: int | None, cpus: list[int] | None) -> None:
    """Start PyTorch's OpenMP pool now and pin its workers, one per CPU after the first,
    and this thread (which OpenMP runs as thread 0) to the first, where TVM's pool puts
    it too (`dlas.measure.vm_timing.set_num_threads`).

    The workers are the threads that run a parallel region: PyTorch's first parallel
    region starts two threads on a 2-thread pool, and the first of them (by id) never
    runs one. Pinning the first started thread, as this did before 2026-12-01, pinned
    that idle one and left OpenMP's worker where it started: floating over every CPU, so
    at times on the main thread's vCPU, where each fork-join waits for a time slice (with
    the main thread pinned before the pool started, the worker stayed on its CPU and
    ResNet18-w0.5 read 640 ms instead of 5-10 on a Zen 3).

    Why not OMP_PLACES/OMP_PROC_BIND: every copy of libgomp in the process reads them as
    it loads and binds the loading thread to the first place; scikit-learn's wheels bring
    a second copy, and whichever loads second finds the other places unusable and says
    so. Pinning the threads this pool started touches nothing else."""
    try:
        import torch
    except ImportError:
        return
    before = _threads()
    if threads:
        torch.set_num_threads(threads)
    a = torch.ones(256, 256)
    torch.mm(a, a)  # a parallel region: the pool's threads start here
    started = sorted(_threads() - before)
    if cpus and len(cpus) > 1:
        pinned = 0
        for tid, cpu in zip(pool_workers(started), cpus[1:], strict=False):
            try:
                os.sched_setaffinity(tid, {cpu})
                pinned += 1
            except OSError:
                pass
        os.sched_setaffinity(0, {cpus[0]})
        if pinned:  # the peer's row says so (`pinned_cpus`)
            os.environ["DLAS_OMP_PINNED"] = ",".join(str(c) for c in cpus[:pinned + 1])


def pool_workers(started: list[int]) -> list[int]:
    """Of the threads `started`, those that run PyTorch's parallel regions, busiest
    first: each one's run time across a few regions, read from the kernel."""
    import torch

    ran = {tid: _cpu_ns(tid) for tid in started}
    b = torch.ones(_POOL_PROBE_SIDE, _POOL_PROBE_SIDE)
    for _ in range(3):
        torch.mm(b, b)
    ran = {tid: _cpu_ns(tid) - ns for tid, ns in ran.items()}
    return sorted((t for t, ns in ran.items() if ns > 0), key=lambda t: -ran[t])


def time_members(request: Any, emit: Emit) -> list[dict[str, Any]]:
    """Verify and time the request's members; one result dict per member, in order."""
    from dlas import registry
    from dlas.measure.placement import PlacementProbe, probe_unavailable
    from dlas.measure.rounds import RoundSampler
    from dlas.runner.cache import Cache
    from dlas.runner.executor import StageExecutor
    from dlas.runner.workspace import StageTally
    from dlas.stages import BY_NAME, IMPORT, TRAIN, verified
    from dlas.stages.base import Inputs, StageEnv
    from dlas.stages.facts import MeasureFacts
    from dlas.stages.timed import Timed, TimedStage, TimingContext, reverify, verify

    _start_openmp(request.threads, request.cpus)
    registry.load_plugins()
    cache = Cache(Path(request.cache_dir))
    env = StageEnv(Path(request.workspace_root), _EventConsole(emit), progress=False)
    executor = StageExecutor(cache, env, StageTally())  # every input is stored already
    context = TimingContext(cpus=request.cpus, cache_root=Path(request.cache_dir))
    results: dict[str, dict[str, Any]] = {}
    timed: list[tuple[Any, Timed, MeasureFacts]] = []
    inputs_of: dict[str, Inputs] = {}
    try:
        for member in request.members:
            emit(event="subject", label=member.label)
            try:
                stage = BY_NAME[member.stage]
                assert isinstance(stage, TimedStage)
                inputs = Inputs(
                    stage,
                    lambda s, m=member: executor.output(m.point, m.keys, s),
                    lambda s, m=member: executor.facts(m.point, m.keys, s))
                made = stage.subject(member.point, inputs, context, Path(member.work_dir))
                if isinstance(made, MeasureFacts):  # the runtime cannot run this model
                    results[member.label] = {"facts": made.to_meta()}
                    continue
                made.label = member.label
                entry = (member.stage, member.keys[member.stage])
                prior = verified.load(cache.root, *entry)
                facts = None if prior is None else reverify(made, inputs[IMPORT],
                                                             member.point, prior)
                if facts is None:  # never checked in full, or the re-check failed
                    facts = verify(made, inputs[IMPORT], member.point, inputs, env,
                                   accuracy_available=inputs.facts(TRAIN).accuracy is not None)
                if prior is None:
                    verified.save(cache.root, *entry, facts)
                emit(event="verified", label=member.label, passed=facts.passed)
                if not facts.passed:
                    made.close()
                    results[member.label] = {"facts": facts.to_meta()}
                    continue
                timed.append((member, made, facts))
                inputs_of[member.label] = inputs
            except Exception as exc:  # noqa: BLE001 - the member fails, the others go on
                results[member.label] = {"error": f"{type(exc).__name__}: {exc}",
                                         "traceback": traceback.format_exc()}
        emit(event="subject", label=None)
        if timed and request.mode == "profile":
            from dlas.runner.profile_worker import profile_members

            results.update(profile_members(request, timed, inputs_of, emit))
        elif timed:
            first = timed[0][1]
            placement = None
            if request.probe_placement:
                why = probe_unavailable()
                if why:
                    emit(event="note", text=f"no placement probe ({why}): rounds are "
                                            "labelled 'unknown'")
                else:
                    placement = PlacementProbe(request.cpus or [])
            sampler = RoundSampler(
                [subject for _, subject, _ in timed], request.policy, placement=placement,
                load=first.probe(), single=request.single, source=request.source,
                threads=request.threads, pinned=bool(request.cpus),
                say=lambda text: emit(event="note", text=text),
                on_round=lambda i, state, rt: emit(event="round", i=i, placement=state,
                                                   rt_ns=rt),
                on_chunk=lambda label: emit(event="subject", label=label),
                seed=request.seed)
            outcome = sampler.run()
            for text in outcome.notes:
                emit(event="note", text=text)
            affinity = _thread_cpus()
            for member, _, facts in timed:
                run = outcome.runs[member.label]
                run.thread_cpus = affinity
                facts.timing = run
                facts.samples_ms = [s for r in run.usable_rounds(run.placement)
                                    for s in r.samples_ms] or \
                    [s for r in run.rounds for s in r.samples_ms]
                results[member.label] = {"facts": facts.to_meta()}
    finally:
        for _, subject, _ in timed:
            subject.close()
        context.close()
    return [results.get(m.label, {"error": "not timed"}) for m in request.members]


def _import_runtimes() -> None:
    """What a worker imports before its first member (most of its start: 2.4-2.7 s on a
    Zen 4), so that a spare has it done before its request comes
    (`dlas.runner.worker_starts`). Nothing here starts a thread pool or pins a thread:
    that waits for the request's threads and CPUs (`_start_openmp`)."""
    import importlib

    for name in ("torch", "tvm", "tvm.relax", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError:  # a runtime this install lacks: its members say so
            continue
    from dlas import registry
    from dlas.runner.executor import StageExecutor  # noqa: F401 - imported for its cost
    from dlas.stages.timed import verify  # noqa: F401 - imported for its cost

    registry.load_plugins()


def _await_request() -> list[str] | None:
    """A spare's wait: import, say so, then read `[REQUEST, RESULT]` (a JSON line) from
    stdin; None at the end of the input (the run needed no more workers)."""
    _import_runtimes()
    _emitter()(event="ready")
    line = sys.stdin.readline().rstrip("\n")
    return [str(path) for path in json.loads(line)] if line else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # first of all: the CPUs this process may use, read while this thread may still use
    # all of them (it is pinned to one later)
    from dlas.runner.worker_starts import WAIT_ARG
    from dlas.targets.host import allowed_cpus

    allowed_cpus()
    if args == [WAIT_ARG]:  # a worker started before its request
        try:
            waited = _await_request()
        except KeyboardInterrupt:
            return 130
        if waited is None:
            return 0
        args = waited
    if len(args) != 2:
        print("usage: python -m dlas.runner.timing_worker REQUEST RESULT "
              "(or --wait, then [REQUEST, RESULT] as one JSON line on stdin)", file=sys.stderr)
        return 2
    import cloudpickle

    request = cloudpickle.loads(Path(args[0]).read_bytes())
    emit = _emitter()
    try:
        results = time_members(request, emit)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: quiet exit
        return 130
    tmp = Path(args[1]).with_suffix(".tmp")
    tmp.write_text(json.dumps(results, default=str))
    os.replace(tmp, args[1])
    return 0


def exit_now(code: int) -> NoReturn:
    """End the worker without the runtimes' exit handlers, once everything the parent
    needs is written and flushed.

    Why: TVM's pool threads, pinned one per CPU, spin on `sched_yield` before they sleep,
    and its destructor joins them at exit. With another process busy on a pinned CPU,
    each of those yields waits a whole scheduling period: measured under the timing
    benchmark's CPU hog (Zen 5, Linux 6.18), workers took 10 and 20 minutes to exit after
    writing their results, a pool thread getting about 3 us of CPU per 4 ms."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        status = main()
    except Exception:  # noqa: BLE001 - say what failed, then leave the same quick way
        traceback.print_exc()
        status = 1
    exit_now(status)
