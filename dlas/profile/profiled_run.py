"""A baseline's per-operator profile as its runtime's profiler took it (`ProfiledRun`),
and what both profilers (`dlas.profile.ort_profile`, `dlas.profile.torch_profile`) share:
the warm-up, the median and interval over runs, the timing without the profiler, the
layers' shares.

Why the layers under-run the whole inference as the profiler saw it: the profilers time
operators, not what happens between them (ONNX Runtime's executor and its profiler's
bookkeeping; PyTorch's Python between calls, the profiler's events and the hooks' ranges).
`ProfiledRun` keeps both that whole (`whole_us`, from the same trace) and the inference
timed without the profiler (`unprofiled_us`), so the caller can say what is left out and
what profiling added. Measured here (1 thread, CIFAR ResNet18 / MobileNetV2): the layers
sum to 97% / 84% of ONNX Runtime's profiled `model_run` and 90% / 64% of PyTorch's
profiled forward, and to 100-108% / 99-100% of the unprofiled inference: the profilers'
overhead lands mostly between the operators, so the layer times are close to what the
operators cost unprofiled. On a model of microsecond kernels the per-kernel overhead (and
ONNX Runtime's whole-microsecond event durations) make the layers longer than the
unprofiled inference: read such a profile for its shares, not its absolute times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dlas.results.layer_profile import LayerTime

#: Inferences run before the profiled ones (the first runs allocate and prepack).
WARMUP = 3


def median_over_runs(samples_us: Sequence[float]) -> tuple[float, list[float] | None]:
    """Median over runs and its 95% percentile-bootstrap interval, each run a round
    (`dlas.results.statistics.median_ci`: the interval every dlas time carries). Runs are
    back to back in one process, so it says how steady the layer was, not how another
    process would time it."""
    from dlas.results.statistics import median_ci

    median = float(np.median(samples_us))
    if len(samples_us) < 2:
        return median, None
    ci = median_ci({("profile", i): [float(s)] for i, s in enumerate(samples_us)})
    return median, [ci.low, ci.high]


@dataclass
class ProfiledRun:
    """A profile: the layers, and the whole inference as the same profiler timed it."""

    layers: list[LayerTime]
    #: Median over runs of the whole inference (ONNX Runtime's `model_run`, PyTorch's
    #: range around `module(x)`), microseconds, and its 95% interval.
    whole_us: float
    whole_ci_us: list[float] | None
    method: str
    runs: int
    #: Median microseconds of the same number of inferences timed without the profiler
    #: (same session or module, same threads): what profiling added to `whole_us`.
    unprofiled_us: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def layers_sum_us(self) -> float:
        return sum(layer.time_us * layer.calls for layer in self.layers)

    @property
    def coverage(self) -> float:
        """The layers' summed time over the whole inference's as the profiler saw it (1:
        nothing left out)."""
        return self.layers_sum_us / self.whole_us if self.whole_us > 0 else 0.0

    def fitted(self, latency_us: float) -> tuple[list[LayerTime], float, float]:
        """The layers and the time outside them as shares of the profiled inference,
        applied to `latency_us` (the inference timed without the profiler): (layers,
        outside_us, scale). The profiler slows what it times (by 1.6x on MobileNetV2's
        microsecond kernels at 2 threads), so its raw times do not add up to the
        unprofiled latency; their shares of the inference it saw do."""
        if self.whole_us <= 0:
            raise ValueError("the profiled inference took no time")
        scale = latency_us / self.whole_us
        layers = []
        for layer in self.layers:
            copy = layer.model_copy()
            copy.time_us = layer.time_us * scale
            copy.ci_us = None if layer.ci_us is None else [v * scale for v in layer.ci_us]
            layers.append(copy)
        outside = max(0.0, self.whole_us - self.layers_sum_us) * scale
        return layers, outside, scale

    @property
    def coverage_unprofiled(self) -> float | None:
        """The layers' summed time over the inference's without the profiler."""
        if not self.unprofiled_us:
            return None
        return self.layers_sum_us / self.unprofiled_us


def time_calls(call: Callable[[], object], runs: int) -> float:
    """Median wall-clock microseconds of `runs` calls (the caller has warmed up)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return float(np.median(samples))


def finish_layers(layers: list[LayerTime]) -> list[LayerTime]:
    """Shares, intensities and GFLOP/s, as the TVM profile fills them."""
    total = sum(layer.time_us * layer.calls for layer in layers)
    for layer in layers:
        layer.share = layer.time_us * layer.calls / total if total > 0 else None
        if layer.flops is not None and layer.bytes:
            layer.intensity = layer.flops / layer.bytes
        if layer.flops is not None and layer.time_us > 0:
            layer.gflops = layer.flops / (layer.time_us * 1e3)
    return layers

