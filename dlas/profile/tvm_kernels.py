"""Each kernel of a compiled TVM library timed on its own, beside the whole model.

TVM 0.27 has no Relax VM profiler (removed in PR #19455), so dlas builds one from what
is left: `VirtualMachine.set_instrument` sees every call the VM makes, with the kernel's
symbol and its argument tensors. One instrumented run records the kernel calls in order
(`capture_calls`); each distinct call (kernel and argument shapes) then becomes a subject
of the product's own sampler (`dlas.measure.rounds`), timed with the library's
`time_evaluator` on the very tensors the model passed it, interleaved round-robin with
the other kernels and with the whole model, in rounds labelled with the vCPUs'
placement. So a layer time and the model's latency come from the same rounds and the
same placement, and their sum can be checked against it (`PointProfile.unaccounted`:
what the VM's own work between kernels, its allocations and the input copy take).

Why not time the calls inside the instrument: the instrument is a Python callback around
every call, including the VM's builtins; its own cost (microseconds) is the size of the
smallest kernels here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlas.measure.rounds import RoundSampler, RoundsPolicy
from dlas.profile.kernels import KernelInfo, KernelManifest, conv_algorithm
from dlas.profile.layers import LayerTime, PointProfile
from dlas.results.statistics import median_ci

#: Each sample of a kernel lasts at least about this long (calls per sample calibrated).
SAMPLE_MIN_S = 200e-6
#: The policy of a profile's rounds when none is given: a CI needs about ten rounds;
#: three samples of each kernel per round keep a round of 40 kernels under a second.
PROFILE_POLICY = RoundsPolicy(samples=30, min_rounds=10, max_rounds=30,
                              placement_budget_s=20.0, noise_retries=3, noise_budget_s=10.0)


@dataclass
class KernelCall:
    """One kernel call the model made: its symbol, the callable and its arguments."""

    symbol: str
    func: Any
    args: list[Any]

    @property
    def signature(self) -> tuple[str, tuple[tuple[tuple[int, ...], str], ...]]:
        """Calls with the same kernel and argument shapes time alike: timed once."""
        return self.symbol, tuple((tuple(int(d) for d in a.shape), str(a.dtype))
                                  for a in self.args if hasattr(a, "shape"))

    @property
    def nbytes(self) -> int:
        """Every argument read or written once: the minimum bytes the call moves."""
        total = 0
        for a in self.args:
            if hasattr(a, "shape"):
                total += int(np.prod([int(d) for d in a.shape], dtype=np.int64)) * \
                    np.dtype(str(a.dtype)).itemsize
        return total


def capture_calls(vm: Any, x: np.ndarray, device: Any, entry: str = "main") -> list[KernelCall]:
    """Run the model once with an instrument that records every kernel call (the VM's
    own `vm.builtin.*` calls are left out)."""
    import tvm

    calls: list[KernelCall] = []

    def instrument(func: Any, symbol: str, before: bool, _ret: Any, *args: Any) -> int:
        if before and not str(symbol).startswith("vm."):
            calls.append(KernelCall(str(symbol), func, list(args)))
        return 0

    vm.set_instrument(instrument)
    try:
        vm[entry](tvm.runtime.tensor(np.ascontiguousarray(x), device))
    finally:
        vm.set_instrument(None)
    return calls


class KernelSubject:
    """One distinct kernel call as a subject of the sampler (`dlas.measure.rounds`)."""

    def __init__(self, label: str, call: KernelCall, library: Any, device: Any,
                 cpus: Sequence[int]) -> None:
        self.label = label
        self.call = call
        self.cpus = cpus
        self.device = device
        self.evaluator_of = lambda number, repeat: library.time_evaluator(
            call.symbol, device, number=number, repeat=repeat)
        self.number = self._calibrate()

    def _calibrate(self) -> int:
        """Calls per sample so that a sample lasts `SAMPLE_MIN_S`."""
        once = min(self.evaluator_of(1, 3)(*self.call.args).results)
        return max(1, math.ceil(SAMPLE_MIN_S / max(once, 1e-9)))

    def time(self, n: int, warmup: int) -> list[float]:
        for _ in range(max(warmup, 1) - 1):  # the evaluator makes one warm-up call itself
            self.call.func(*self.call.args)
        return [float(t) for t in self.evaluator_of(self.number, n)(*self.call.args).results]


class ReplaySubject:
    """Every kernel call of the model, back to back from Python, in the model's order:
    the model without the VM's own work between kernels. Beside the whole model and the
    summed layers it splits what the layers leave out: summed layers vs replay is how
    far kernels timed alone (their inputs warm in cache) add up; replay vs the model is
    the VM's own work (plus Python's call overhead, ~0.5 us a call, which the replay
    pays and the VM does not)."""

    label = "replay of the kernel calls"

    def __init__(self, calls: list[KernelCall], cpus: Sequence[int]) -> None:
        self.calls = [(c.func, c.args) for c in calls]
        self.cpus = cpus

    def time(self, n: int, warmup: int) -> list[float]:
        for _ in range(max(warmup, 1)):
            self._once()
        out = []
        for _ in range(n):
            began = time.perf_counter()
            self._once()
            out.append(time.perf_counter() - began)
        return out

    def _once(self) -> None:
        for func, args in self.calls:
            func(*args)


def _library(vm_library: Any, symbol: str) -> Any:
    """The module that holds the kernels: the exported library imported by the VM
    executable (`time_evaluator` looks a name up in one module, not its imports)."""
    for module in [vm_library, *vm_library.imports]:
        if module.implements_function(symbol, False):
            return module
    raise LookupError(f"no module of the library defines {symbol}")


def median_and_ci(run: Any) -> tuple[float, list[float] | None, int]:
    """Median ms of a timing run's usable rounds in its placement, its 95% CI and the
    number of rounds (all rounds when none was usable)."""
    rounds = run.usable_rounds(run.placement) or run.rounds
    groups = {(run.run_id, r.index): r.samples_ms for r in rounds if r.samples_ms}
    samples = [s for r in rounds for s in r.samples_ms]
    median = float(np.median(samples))
    try:
        ci = median_ci(groups)
        interval = [ci.low, ci.high]
    except ValueError:
        interval = None
    return median, interval, len(groups)


def layer_of(index: int, call: KernelCall, info: KernelInfo, conv: Any,
             time_us: float, ci_us: list[float] | None) -> LayerTime:
    """The layer record of one kernel call: what it computes and how much work it is."""
    layer = LayerTime(index=index, name=call.symbol, op=info.op, time_us=time_us,
                      ci_us=ci_us, bytes=call.nbytes, schedule=info.schedule,
                      flops=info.flops)
    tensors = [a for a in call.args if hasattr(a, "shape")]
    if tensors:
        layer.out_shape = [int(d) for d in tensors[-1].shape]  # destination-passing: last
        layer.dtype = str(tensors[0].dtype)
    spec = conv.spec if conv is not None else (info.specs[0] if info.specs else None)
    if info.has_conv:
        layer.algorithm = conv_algorithm(info, conv)
        layer.conv_index = conv.index if conv is not None else None
        layer.nnz = conv.nnz if conv is not None else None
    if spec is not None:
        n, _, oh, ow = spec.out_shape
        layer.data_shape, layer.weight_shape = list(spec.data_shape), list(spec.weight_shape)
        layer.out_shape = list(spec.out_shape)
        layer.strides, layer.padding = list(spec.strides), list(spec.padding)
        layer.groups, layer.dtype, layer.macs = spec.groups, spec.data_dtype, spec.macs
        layer.layout = spec.out_layout
        # a sparse kernel computes only the non-zeros; a dense one every weight
        layer.flops = (2.0 * layer.nnz * n * oh * ow if info.dynamic and layer.nnz is not None
                       else 2.0 * spec.macs)
    elif info.op == "dense" and len(tensors) >= 2:
        k = int(tensors[0].shape[-1])
        layer.macs = int(np.prod(layer.out_shape or [0])) * k
        layer.flops = layer.flops or 2.0 * layer.macs
    return layer


def profile_tvm(variant: Any, manifest: KernelManifest, x: np.ndarray, *,
                placement: Any, load: Any, single: bool, threads: int | None,
                pinned: bool, policy: RoundsPolicy = PROFILE_POLICY,
                say: Callable[[str], None] | None = None,
                on_round: Callable[[int, str, float | None], None] | None = None,
                seed: int = 0) -> PointProfile:
    """The per-layer profile of a compiled variant (a `dlas.stages.measure.TvmVariant`
    that passed verification, its input `x` set)."""
    start = time.perf_counter()
    calls = capture_calls(variant.vm, x, variant.session.device)
    mapped = manifest.map_calls([c.symbol for c in calls])
    library = variant.vm_library
    subjects: dict[tuple[Any, ...], KernelSubject] = {}
    label_of: list[str] = []
    for i, call in enumerate(calls):
        sig = call.signature
        if sig not in subjects:
            subjects[sig] = KernelSubject(f"{i:03d} {call.symbol}", call,
                                          _library(library, call.symbol),
                                          variant.session.device, variant.cpus)
        label_of.append(subjects[sig].label)
    replay = ReplaySubject(calls, variant.cpus)
    sampler = RoundSampler([variant, replay, *subjects.values()], policy, placement=placement,
                           load=load, single=single, source="profile", threads=threads,
                           pinned=pinned, say=say, on_round=on_round, seed=seed)
    outcome = sampler.run()
    figures = {label: median_and_ci(run) for label, run in outcome.runs.items()}
    layers = []
    for i, ((info, conv), call, label) in enumerate(zip(mapped, calls, label_of, strict=True)):
        median_ms, ci_ms, _ = figures[label]
        layers.append(layer_of(i, call, info, conv, median_ms * 1e3,
                               [v * 1e3 for v in ci_ms] if ci_ms else None))
    latency, latency_ci, rounds = figures[variant.label]
    replay_ms = figures[replay.label][0]
    total_ms = sum(layer.time_us for layer in layers) / 1e3
    for layer in layers:
        layer.share = layer.time_us / 1e3 / total_ms if total_ms > 0 else None
    return PointProfile(
        key="", runtime="tvm", label=variant.label, threads=threads,
        placement=outcome.placement, latency_median_ms=latency, latency_ci_ms=latency_ci,
        layers_sum_ms=total_ms, unaccounted=1.0 - total_ms / latency if latency > 0 else 0.0,
        replay_ms=replay_ms,
        method="time_evaluator per kernel, interleaved with the whole model", rounds=rounds,
        seconds=time.perf_counter() - start, notes=list(outcome.notes), layers=layers)
