"""The profile side of the timing worker (`dlas.runner.timing_worker`, request mode
"profile"): the members were built and verified exactly as for timing, with the same
pinned threads, in a fresh process; here each is profiled layer by layer.

* A TVM variant: its kernels timed one by one beside the whole model
  (`dlas.profile.tvm_kernels`), mapped back to the model's layers through the kernel
  manifest (`dlas.profile.kernels`).
* A baseline: its runtime's own profiler (`dlas.profile.peer_profile`); the whole model is
  timed by the same sampler as a TVM variant, so latencies mean the same thing.

Every layer is then placed on the machine's roofline (`dlas.profile.roofline`), with
the limits measured once per target and threads in this same process
(`dlas.profile.limits`).
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from dlas.results.layer_profile import PointProfile

#: Profiled runs of a baseline's profiler (each layer's time is their median).
BASELINE_RUNS = 50


#: Seconds a profile waits for the preferred (near) placement. A profile is internally
#: consistent in whichever placement it got (its layers and its whole-model time share
#: rounds), and records it; the sweep's own budget (30 s by default) per point made the
#: profile of a 48-point sweep take 35 minutes on a VM that stayed far.
PROFILE_PLACEMENT_WAIT_S = 5.0


def profile_policy(request: Any) -> Any:
    """The rounds of a profile: the sweep's rounds and budgets (`rounds_policy`), three
    samples of each kernel per round (a kernel's sample is calibrated to ~0.2 ms, so a
    round of 40 kernels stays under a second), at most 30 rounds, and a short wait for
    the preferred placement."""
    from dataclasses import replace

    policy = request.policy
    return replace(policy, samples=3 * policy.min_rounds,
                   max_rounds=min(policy.max_rounds, 30),
                   placement_budget_s=min(policy.placement_budget_s,
                                          PROFILE_PLACEMENT_WAIT_S))


def _placement(request: Any, emit: Any) -> Any:
    from dlas.measure.placement import PlacementProbe, probe_unavailable

    if not request.probe_placement:
        return None
    why = probe_unavailable()
    if why:
        emit(event="note", text=f"no placement probe ({why})")
        return None
    return PlacementProbe(request.cpus or [])


def _tvm_profile(member: Any, made: Any, inputs: Any, request: Any, emit: Any,
                 placement: Any) -> PointProfile:
    from dlas.profile.kernels import kernel_manifest
    from dlas.profile.tvm_kernels import profile_tvm
    from dlas.stages import COMPILE, IMPORT

    point = member.point
    compiled = inputs[COMPILE]
    algorithm = point.algorithms.option.fn(point.algorithms.params)
    manifest = kernel_manifest(inputs[IMPORT].model, algorithm, compiled.facts.tvm_target,
                               compiled.facts.tuning)
    return profile_tvm(
        made, manifest, made.x, placement=placement, load=made.probe(),
        single=request.single, threads=made.threads, pinned=bool(request.cpus),
        say=lambda text: emit(event="note", text=text),
        on_round=lambda i, state, rt: emit(event="round", i=i, placement=state, rt_ns=rt),
        policy=profile_policy(request), seed=request.seed)


def _baseline_profile(made: Any, request: Any, emit: Any, placement: Any) -> PointProfile:
    from dlas.measure.rounds import RoundSampler
    from dlas.profile.peer_profile import profile_peer
    from dlas.profile.tvm_kernels import median_and_ci

    start = time.perf_counter()
    sampler = RoundSampler([made], profile_policy(request), placement=placement, load=made.probe(),
                           single=request.single, source="profile", threads=made.threads,
                           pinned=bool(request.cpus), seed=request.seed,
                           say=lambda text: emit(event="note", text=text))
    outcome = sampler.run()
    latency, latency_ci, rounds = median_and_ci(outcome.runs[made.label])
    run = profile_peer(made.peer, made.x, threads=made.threads or 1, runs=BASELINE_RUNS)
    layers, outside_us, scale = run.fitted(latency * 1e3)
    total_ms = sum(layer.time_us * layer.calls for layer in layers) / 1e3
    for layer in layers:
        layer.share = layer.time_us * layer.calls / 1e3 / total_ms if total_ms > 0 else None
    notes = list(outcome.notes) + run.notes
    notes.append(f"{run.method} saw the inference take {run.whole_us / 1e3:.3f} ms "
                 f"(unprofiled in its own session: "
                 + (f"{run.unprofiled_us / 1e3:.3f} ms" if run.unprofiled_us else "not timed")
                 + f"); its times are scaled by {scale:.3f} to the latency")
    return PointProfile(
        key="", runtime=made.runtime, label=made.label, threads=made.threads,
        placement=outcome.placement, latency_median_ms=latency, latency_ci_ms=latency_ci,
        layers_sum_ms=total_ms, unaccounted=1.0 - total_ms / latency if latency > 0 else 0.0,
        outside_us=outside_us, time_scale=scale, method=run.method, rounds=rounds,
        seconds=time.perf_counter() - start, notes=notes, layers=layers)


def _limits(request: Any, point: Any) -> Any:
    """The machine's limits for the member's target, or None where they cannot be
    measured here (a board over RPC, a GPU)."""
    from dlas.profile.limits import cached_limits
    from dlas.targets.resolve import resolve_target

    target = resolve_target(point)
    if target.rpc is not None or target.device != "cpu":
        return None
    return cached_limits(Path(request.cache_dir), target.tvm_target,
                         request.threads or 1, request.cpus)


def profile_members(request: Any, timed: list[tuple[Any, Any, Any]],
                    inputs_of: dict[str, Any], emit: Any) -> dict[str, dict[str, Any]]:
    """The profile of each verified member: {label: {"facts": profile and limits as
    JSON}} or {label: {"error": ...}}."""
    from dlas.profile.roofline import place_layers

    placement = _placement(request, emit)
    out: dict[str, dict[str, Any]] = {}
    limits_by_target: dict[str, Any] = {}
    for member, made, _facts in timed:
        emit(event="subject", label=member.label)
        try:
            if made.runtime == "tvm":
                profile = _tvm_profile(member, made, inputs_of[member.label], request, emit,
                                       placement)
            else:
                profile = _baseline_profile(made, request, emit, placement)
            target_key = member.point.targets.identity()
            key = str(target_key)
            if key not in limits_by_target:
                emit(event="activity", text="measuring the machine's limits")
                limits_by_target[key] = _limits(request, member.point)
            limits = limits_by_target[key]
            if limits is not None:
                profile.layers = place_layers(profile.layers, limits)
            out[member.label] = {"facts": {
                "profile": profile.model_dump(),
                "limits": None if limits is None else limits.model_dump()}}
        except Exception as exc:  # noqa: BLE001 - this member fails, the others go on
            out[member.label] = {"error": f"{type(exc).__name__}: {exc}",
                                 "traceback": traceback.format_exc()}
    emit(event="subject", label=None)
    return out
