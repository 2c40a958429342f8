"""Each kernel of a compiled TVM library timed in the model's sequence and alone, beside
the whole model.

TVM 0.27 has no Relax VM profiler (removed in PR #19455), so dlas builds one from what
is left: `VirtualMachine.set_instrument` sees every call the VM makes, with the kernel's
symbol and its argument tensors. One instrumented run records the kernel calls in order
(`capture_calls`). Three kinds of subject then share the product's own sampler
(`dlas.measure.rounds`), interleaved round-robin in rounds labelled with the vCPUs'
placement: the whole model; the kernel calls replayed back to back, each call timed
where it runs (`ReplaySubject`); and each distinct call (kernel and argument shapes)
alone, with the library's `time_evaluator` on the very tensors the model passed it.

A layer's time is its time in sequence: with the caches as the kernels before it left
them, what it costs inside the model. Timed alone (`LayerTime.alone_us`) a kernel finds
its weights warm, which made the layers of ResNet18/MobileNetV2 sum to 69-89% of the
replay. So the layers add up to the replay, and the replay and the model's latency
differ by the VM's own work between kernels (`PointProfile.outside_us`: dispatch,
allocation, the input copy).

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

from dlas.measure.rounds import RoundSampler
from dlas.measure.stopping import WARMUP_S, RoundsPolicy
from dlas.profile.kernels import KernelInfo, KernelManifest, conv_algorithm
from dlas.results.latency import run_figures, run_groups
from dlas.results.layer_profile import LayerTime, PointProfile
from dlas.results.statistics import median_ci

#: How a TVM profile's layers are timed.
TVM_METHOD = ("each kernel timed in sequence (the model's kernel calls replayed back to "
              "back), interleaved with the whole model and with each kernel alone")
#: Each sample of a kernel lasts at least about this long (calls per sample calibrated).
SAMPLE_MIN_S = 200e-6
#: The policy of a profile's rounds when none is given: a CI needs about ten rounds;
#: three samples of each kernel per round keep a round of 40 kernels under a second.
PROFILE_POLICY = RoundsPolicy(samples=30, min_rounds=10, max_rounds=30,
                              placement_budget_s=20.0, noise_retries=3, noise_budget_s=10.0,
                              warmup_s=WARMUP_S)


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
    the model without the VM's own work between kernels. Each call is timed where it
    runs (`perf_counter` between calls), so a kernel's time in sequence, with the caches
    as the kernels before it left them, is measured beside its time alone
    (`KernelSubject`, its inputs warm); the layers of a profile take the former, so they
    add up to the replay, and the replay and the model's latency differ by the VM's own
    work. Python's cost of making each call, which the VM does not pay, is measured in
    the same chunk (the same calls to a no-op) and taken out.

    On a GPU a kernel call only launches the kernel, so `sync` (the device's) is called
    after every call, and after every no-op call too, so that what is taken out includes
    the synchronisation's own cost: a call's time is then its launch and its run."""

    label = "replay of the kernel calls"

    def __init__(self, calls: list[KernelCall], cpus: Sequence[int],
                 sync: Callable[[], None] | None = None) -> None:
        import tvm

        self.sync = sync
        self.calls = [(c.func, c.args) for c in calls]
        #: The same calls to a function that does nothing: Python's and the FFI's cost
        #: of a call with these arguments (~0.8 us with four tensors on Zen 1), which
        #: the VM does not pay; taken out of every call's time (`time`).
        nop = tvm.get_global_func("testing.nop")
        self.null_calls = [(nop, args) for _, args in self.calls]
        self.cpus = cpus
        #: Per chunk the sampler took: its samples (ms, as the timing run stores them)
        #: and each replay's per-call seconds, so that per-call times can be taken from
        #: exactly the rounds the sampler kept (`in_sequence`).
        self.chunks: list[tuple[list[float], list[list[float]]]] = []

    def time(self, n: int, warmup: int) -> list[float]:
        for _ in range(max(warmup, 1)):
            self._once()
        replays = [self._stamped(self.calls, self.sync) for _ in range(n)]
        nulls = [self._stamped(self.null_calls, self.sync) for _ in range(n)]
        cost = [float(np.median(column)) for column in zip(*nulls, strict=True)]
        per_call = [[max(0.0, d - c) for d, c in zip(replay, cost, strict=True)]
                    for replay in replays]
        out = [max(0.0, sum(replay) - sum(cost)) for replay in replays]
        self.chunks.append(([s * 1e3 for s in out], per_call))
        return out

    @staticmethod
    def _stamped(calls: list[tuple[Any, list[Any]]],
                 sync: Callable[[], None] | None = None) -> list[float]:
        """One pass over `calls`, each call's seconds (`perf_counter` between calls, after
        `sync` where there is one)."""
        clock = time.perf_counter
        stamps = [clock()]
        for func, args in calls:
            func(*args)
            if sync is not None:
                sync()
            stamps.append(clock())
        return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]

    def _once(self) -> None:
        for func, args in self.calls:
            func(*args)
        if self.sync is not None:
            self.sync()

    def in_sequence(self, run: Any) -> list[tuple[float, list[float] | None]]:
        """Per call: its median microseconds and 95% CI in the replays of the timing run's
        usable rounds in its placement (those the model's latency comes from)."""
        wanted = list(run_groups(run).values())
        matrices = [per_call for samples, per_call in self.chunks if samples in wanted]
        out = []
        for i in range(len(self.calls)):
            groups = {("replay", g): [replay[i] * 1e6 for replay in m]
                      for g, m in enumerate(matrices) if m}
            samples = [s for g in groups.values() for s in g]
            if not samples:
                raise RuntimeError("the replay's rounds hold no per-call times")
            try:
                ci = median_ci(groups)
                interval: list[float] | None = [ci.low, ci.high]
            except ValueError:
                interval = None
            out.append((float(np.median(samples)), interval))
        return out


def _library(vm_library: Any, symbol: str) -> Any:
    """The module that holds the kernels: the exported library imported by the VM
    executable (`time_evaluator` looks a name up in one module, not its imports)."""
    for module in [vm_library, *vm_library.imports]:
        if module.implements_function(symbol, False):
            return module
    raise LookupError(f"no module of the library defines {symbol}")


def median_and_ci(run: Any) -> tuple[float, list[float] | None, int]:
    """Median ms of a timing run, its 95% CI and its number of rounds: the row's figure
    (`dlas.results.latency.run_figures`), so a profile's latency is the row's kind."""
    fig = run_figures(run)
    return fig.median, [fig.ci_low, fig.ci_high], fig.rounds


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


def device_sync(device: Any) -> Callable[[], None] | None:
    """The wait for `device`'s queued work where calls on it only launch (a GPU), None
    on a CPU, whose kernel calls return when done."""
    import tvm

    return None if device.dlpack_device_type() == tvm.cpu(0).dlpack_device_type() else device.sync


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
    replay = ReplaySubject(calls, variant.cpus, device_sync(variant.session.device))
    sampler = RoundSampler([variant, replay, *subjects.values()], policy, placement=placement,
                           load=load, single=single, source="profile", threads=threads,
                           pinned=pinned, say=say, on_round=on_round, seed=seed)
    outcome = sampler.run()
    figures = {label: median_and_ci(run) for label, run in outcome.runs.items()}
    in_sequence = replay.in_sequence(outcome.runs[replay.label])
    layers = []
    for i, ((info, conv), call, label) in enumerate(zip(mapped, calls, label_of, strict=True)):
        time_us, ci_us = in_sequence[i]
        layer = layer_of(i, call, info, conv, time_us, ci_us)
        layer.alone_us = figures[label][0] * 1e3
        layers.append(layer)
    latency, latency_ci, rounds = figures[variant.label]
    replay_ms = figures[replay.label][0]
    total_ms = sum(layer.time_us for layer in layers) / 1e3
    alone_ms = sum(layer.alone_us or 0.0 for layer in layers) / 1e3
    for layer in layers:
        layer.share = layer.time_us / 1e3 / total_ms if total_ms > 0 else None
    notes = list(outcome.notes)
    notes.append(f"kernels timed alone (inputs warm in cache) sum to {alone_ms:.3f} ms, "
                 f"{alone_ms / total_ms:.0%} of their time in sequence" if total_ms > 0
                 else "no kernel time in sequence")
    return PointProfile(
        key="", runtime="tvm", label=variant.label, threads=threads,
        placement=outcome.placement, latency_median_ms=latency, latency_ci_ms=latency_ci,
        layers_sum_ms=total_ms, unaccounted=1.0 - total_ms / latency if latency > 0 else 0.0,
        outside_us=max(0.0, latency - replay_ms) * 1e3, replay_ms=replay_ms,
        method=TVM_METHOD, rounds=rounds,
        seconds=time.perf_counter() - start, notes=notes, layers=layers)
