"""Stage `measure`: the compiled library loaded on the target's device (this machine's CPU
or GPU, or a board over RPC), verified, then timed with the other variants of its model
(`dlas.stages.timed`, in the timing worker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlas.measure.load import CpuLoadProbe
from dlas.stages.base import Inputs
from dlas.stages.compile import COMPILE
from dlas.stages.timed import (
    Timed,
    TimedStage,
    TimingContext,
    dataset_accuracy,
    timing_key_inputs,
)
from dlas.sweep.grid import Point
from dlas.targets.resolve import resolve_target


class TvmVariant(Timed):
    """A compiled library loaded in a measurement session (`dlas.measure.session`)."""

    runtime = "tvm"

    def __init__(self, session: Any, library: Path, num_threads: int | None) -> None:
        self.session = session
        self.library_path = Path(library)
        self.vm = session.load(library)
        self.threads = session.set_threads(num_threads) or None
        pin = getattr(session, "pin", None)
        self.cpus = list(pin[: self.threads]) if pin and self.threads else []

    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        from dlas.measure.vm_timing import run_batch

        return run_batch(self.vm, inputs, device=self.session.device)

    def time_runs(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        from dlas.measure.vm_timing import time_vm

        return time_vm(self.vm, x, repeat=repeat, number=number, warmup=warmup,
                       device=self.session.device)

    def accuracy(self, dataset: Any) -> float:
        return dataset_accuracy(self.run_batch1, dataset)

    @property
    def vm_library(self) -> Any:
        """The library as a runtime module, for timing its kernels one by one (the
        per-layer profile, `dlas.profile.tvm_kernels`); this machine's CPU only."""
        import tvm

        from dlas.measure.session import LocalCPUSession

        if type(self.session) is not LocalCPUSession:
            raise NotImplementedError(
                f"per-kernel profiles run on this machine's CPU only, not in a "
                f"{type(self.session).__name__}")
        return tvm.runtime.load_module(str(self.library_path))

    def probe(self) -> CpuLoadProbe | None:
        return self.session.load_probe()


class MeasureStage(TimedStage):
    name = "measure"
    #: 3: timed in the timing worker, interleaved with the model's other variants, in
    #: rounds labelled with the vCPU placement; threads pinned.
    version = 3
    parent = "compile"
    parent_field = "compiled"
    reads = ("targets",)
    needs = ("data", "train", "import", "compile")
    #: the timing method and the verification (a change re-times: a row says what the
    #: code measuring it does)
    code = ("measure", "stages/timed", "stages/verified")
    libraries = ("apache-tvm", "apache-tvm-ffi")

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return timing_key_inputs(point)

    def subject(self, point: Point, inputs: Inputs, context: TimingContext,
                work_dir: Path) -> Timed:
        target = resolve_target(point)
        library = inputs[COMPILE].executable
        return TvmVariant(context.session(target), library, target.num_threads)


MEASURE = MeasureStage()
