"""Stage `measure`: the compiled library loaded on the target's device (this process's
CPU or GPU, or a board over RPC), verified, then timed (`dlas.stages.timed`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlas.measure.sampling import CpuLoadProbe
from dlas.stages.base import Job, Resources, StoredStage
from dlas.stages.compile import COMPILE
from dlas.stages.facts import MeasureFacts
from dlas.stages.import_model import IMPORT
from dlas.stages.timed import Timed, dataset_accuracy, timing_key_inputs, verify_and_time
from dlas.stages.train import TRAIN
from dlas.sweep.grid import Point
from dlas.targets.resolve import resolve_target


class TvmVariant(Timed):
    """A compiled library loaded in a measurement session (`dlas.measure.session`)."""

    runtime = "tvm"

    def __init__(self, session: Any, library: Path, num_threads: int | None) -> None:
        self.session = session
        self.vm = session.load(library)
        self.threads = session.set_threads(num_threads) or None
        self.retake_on_cv = session.retake_on_cv

    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        from dlas.measure.timing import run_batch

        return run_batch(self.vm, inputs, device=self.session.device)

    def time(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        from dlas.measure.timing import time_vm

        return time_vm(self.vm, x, repeat=repeat, number=number, warmup=warmup,
                       device=self.session.device)

    def accuracy(self, dataset: Any) -> float:
        return dataset_accuracy(self.run_batch1, dataset)

    def probe(self) -> CpuLoadProbe | None:
        return self.session.load_probe()


class MeasureStage(StoredStage[MeasureFacts, MeasureFacts]):
    name = "measure"
    #: 2: per-precision verification, agreement with float32, accuracy of
    #: reduced-precision compiled models.
    version = 2
    parent = "compile"
    parent_field = "compiled"
    reads = ("targets",)
    needs = ("data", "train", "import", "compile")
    facts_type = MeasureFacts
    resources = Resources(cpus=2, exclusive=True)

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return timing_key_inputs(point)

    def compute(self, job: Job) -> MeasureFacts:
        from dlas.measure.session import open_session

        target = resolve_target(job.point)
        imported = job.inputs[IMPORT]
        library = job.inputs[COMPILE].executable
        accuracy_available = job.inputs.facts(TRAIN).accuracy is not None
        with open_session(target) as session:
            variant = TvmVariant(session, library, target.num_threads)
            return verify_and_time(variant, imported, job,
                                   accuracy_available=accuracy_available)

    def load(self, path: Path, facts: MeasureFacts) -> MeasureFacts:
        return facts


MEASURE = MeasureStage()
