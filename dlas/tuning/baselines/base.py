"""The contract of a baseline option (a `tuning` option tagged `baseline`).

A baseline option is `fn(params, model: BaselineModel) -> Peer`: given the compress
stage's output it returns a *peer*, the model loaded in another runtime with the target's
thread count. The baseline stage (`dlas.stages.baseline`) verifies the peer against the point's
reference outputs with the TVM path's `verify_outputs`, measures its accuracy where it
computes something other than PyTorch's float32 model, and times it with `time_peer`: the
TVM path's method (batch 1, `measure_repeat` samples of `measure_number` calls each,
warm-up discarded, median reported, every sample stored).

An option that finds it cannot run the model raises `BaselineNotRunnable`; the point is
then recorded as `not_runnable` with the reason. What can be known from the sweep alone
(the target, the precision of a built-in compression) is checked earlier by the option's
constraints, so `dlas plan` already shows it.
"""

from __future__ import annotations

import platform
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: The numeric format each built-in compression deploys in (others: float32 unless
#: tagged `quantized`, then unknown until the compress stage has run).
_PRECISION_OF = {"float16": "float16", "int8": "int8", "int8_uncalibrated": "int8"}
_QUANTIZED_TAG = "quantized"


class BaselineNotRunnable(Exception):
    """The runtime cannot run this model; the message says why (recorded as the reason)."""


@dataclass
class BaselineModel:
    """What a baseline runs: one point's compress-stage output and the target's threads."""

    #: The compressed PyTorch module (float32 weights; shared with other points: copy
    #: before changing it).
    model: Any
    #: float32, float16 or int8: what the deployed model computes in.
    precision: str
    #: One sample's shape (C, H, W); the peer runs batch 1.
    input_shape: tuple[int, ...]
    #: Threads the target uses; the peer's intra-op parallelism is set to it.
    threads: int
    #: int8: the QDQ ONNX model the compress stage quantized (what "int8" means here).
    quantized_onnx: bytes | None = None
    #: Where the peer may keep what it built (e.g. its ONNX file), kept with the result.
    work_dir: Path | None = None
    #: The workspace's cache, where a peer keeps the float32 ONNX export of `model`
    #: across timing runs (`dlas.compression.int8.export_memo`); None: exported every time.
    export_cache: Path | None = None
    #: The compression's own facts (e.g. float16's accumulator).
    info: dict[str, Any] = field(default_factory=dict)
    #: CPUs to pin the intra-op threads to, one per thread, the first being the calling
    #: thread's (the timing worker pins every runtime alike: docs/timing.md); None: the
    #: runtime places its threads itself.
    cpus: list[int] | None = None
    #: Where the target runs the model: "cpu", or "cuda" (this machine's first GPU, for
    #: an option whose constraints admit it: `local_cpu_or_gpu`).
    device: str = "cpu"


class Peer(ABC):
    """A model loaded in a baseline runtime."""

    #: The runtime's name as rows show it (the option's name).
    runtime: str = ""
    #: Intra-op threads the runtime was configured with.
    threads: int = 1

    @abstractmethod
    def run(self, inputs: np.ndarray) -> np.ndarray:
        """Logits (N, classes) float32 for float32 inputs (N, C, H, W)."""

    @abstractmethod
    def bind(self, x: np.ndarray) -> Callable[[], object]:
        """A call running one inference on the batch-1 input `x`, already converted to the
        runtime's format: what is timed (TVM's evaluator likewise times with the input on
        the device)."""

    def info(self) -> dict[str, Any]:
        """What identifies this runtime setup in the results (version, settings)."""
        return {"runtime": self.runtime, "threads": self.threads}

    def mismatch_hint(self) -> str | None:
        """What to do when this runtime's output fails verification, if it knows a cause
        (e.g. ONNX Runtime's int8 kernels on a CPU without VNNI)."""
        return None

    def close(self) -> None:  # noqa: B027 - most runtimes change nothing process-wide
        """Release the runtime and restore process-wide settings it changed."""

    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        """Run samples one by one at batch 1, as the deployed model is run."""
        return np.concatenate([self.run(inputs[i : i + 1]).reshape(1, -1)
                               for i in range(inputs.shape[0])]).astype(np.float32)


def time_peer(call: Callable[[], object], repeat: int, number: int = 1,
              warmup: int = 1) -> list[float]:
    """Seconds per inference, `repeat` samples, each the mean of `number` calls, after
    `warmup` discarded calls: the semantics of TVM's time evaluator used for TVM points."""
    if repeat < 1 or number < 1:
        raise ValueError("repeat and number must be >= 1")
    for _ in range(max(warmup, 0)):
        call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - start) / number)
    return samples


# -- constraints (checked when the grid is expanded) ----------------------------------------


def precision_of(point: Any) -> str | None:
    """The precision the point's compression deploys in, when the sweep alone tells it."""
    compression = point.compression
    if compression.name in _PRECISION_OF:
        return _PRECISION_OF[compression.name]
    return None if _QUANTIZED_TAG in compression.tags else "float32"


def local_cpu_only(point: Any) -> str | None:
    """Baselines run in this process, on this CPU: not on a GPU, a remote board, or a CPU
    of another architecture."""
    return _local_reason(point, gpu=False)


def local_cpu_or_gpu(point: Any) -> str | None:
    """As `local_cpu_only`, but a CUDA target on this machine's GPU is admitted too: the
    runtime then runs on that GPU, the peer the paper's GPU rows need."""
    return _local_reason(point, gpu=True)


def _local_reason(point: Any, gpu: bool) -> str | None:
    from dlas.targets.resolve import resolve_target

    spec = resolve_target(point)
    where = "local CPU or GPU" if gpu else "local CPU"
    if getattr(spec, "rpc", None) is not None:
        return (f"target '{spec.name}' is a remote board (RPC); this baseline runs only on "
                f"the {where} for now")
    on_gpu = gpu and spec.device == "cuda" and spec.tvm_target.get("kind") == "cuda"
    if not on_gpu and (spec.device != "cpu" or spec.tvm_target.get("kind") != "llvm"):
        return (f"target '{spec.name}' runs on {spec.device} ({spec.tvm_target.get('kind')}); "
                f"this baseline runs only on the {where} for now")
    unmeasurable = getattr(spec, "unmeasurable", None)
    if unmeasurable:
        return f"target '{spec.name}' cannot be measured here: {unmeasurable}"
    host = spec.tvm_target.get("host") if on_gpu else spec.tvm_target
    triple = str((host or {}).get("mtriple") or "")
    arch = platform.machine().lower().replace("arm64", "aarch64").replace("amd64", "x86_64")
    if triple and not triple.lower().startswith(arch):
        return (f"target '{spec.name}' is a {triple.split('-')[0]} CPU and this machine is "
                f"{arch}; this baseline runs only on the {where}")
    return None
