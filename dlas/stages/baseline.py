"""Stage `baseline`: a baseline point's one stage after import. The compressed model runs
in the baseline runtime (a `tuning` option tagged `baseline`: PyTorch, ONNX Runtime),
verified against the same reference outputs as the TVM variants and timed by the same
path (`dlas.stages.timed`). A runtime that cannot run the model says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlas.measure.sampling import CpuLoadProbe
from dlas.stages.base import Job, Resources, StoredStage
from dlas.stages.compress import COMPRESS
from dlas.stages.data import DATA
from dlas.stages.facts import MeasureFacts
from dlas.stages.import_model import IMPORT
from dlas.stages.timed import Timed, dataset_accuracy, timing_key_inputs, verify_and_time
from dlas.stages.train import TRAIN
from dlas.sweep.grid import Point
from dlas.targets.resolve import resolve_target


class BaselineRun(Timed):
    """A baseline runtime's peer (`dlas.tuning.baselines.base.Peer`)."""

    def __init__(self, peer: Any) -> None:
        self.peer = peer
        self.runtime = peer.runtime
        self.threads = peer.threads

    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        return self.peer.run_batch1(inputs)

    def time(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        from dlas.tuning.baselines.base import time_peer

        return time_peer(self.peer.bind(x), repeat=repeat, number=number, warmup=warmup)

    def accuracy(self, dataset: Any) -> float:
        return dataset_accuracy(self.peer.run, dataset)

    def probe(self) -> CpuLoadProbe | None:
        return CpuLoadProbe(self.peer.threads)

    def info(self) -> dict[str, Any] | None:
        return self.peer.info()

    def mismatch_hint(self) -> str | None:
        return self.peer.mismatch_hint()


def baseline_threads(point: Point) -> int:
    from dlas.targets.host import available_cores

    return resolve_target(point).num_threads or available_cores()


class BaselineStage(StoredStage[MeasureFacts, MeasureFacts]):
    name = "baseline"
    #: 2: accuracy of a reduced-precision baseline measured in its own runtime, always.
    version = 2
    parent = "import"
    parent_field = "imported"
    reads = ("tuning", "targets")
    needs = ("data", "train", "compress", "import")
    facts_type = MeasureFacts
    resources = Resources(cpus=2, exclusive=True)

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return {"runtime": point.tuning.identity(), "target": point.targets.identity(),
                **timing_key_inputs(point)}

    def compute(self, job: Job) -> MeasureFacts:
        from dlas.tuning.baselines.base import BaselineModel, BaselineNotRunnable

        point = job.point
        compressed = job.inputs[COMPRESS]
        imported = job.inputs[IMPORT]
        model = BaselineModel(
            compressed.model, imported.facts.precision,
            tuple(job.inputs[DATA].input_shape), baseline_threads(point),
            quantized_onnx=compressed.quantized_onnx(), work_dir=job.dir,
            info=compressed.facts.info or {})
        try:
            with job.env.console.activity(f"loading the model in {point.tuning.label}"):
                peer = point.tuning.option.fn(point.tuning.params, model)
        except BaselineNotRunnable as exc:
            return MeasureFacts(not_runnable=str(exc))
        try:
            return verify_and_time(BaselineRun(peer), imported, job,
                                   accuracy_available=job.inputs.facts(TRAIN).accuracy
                                   is not None)
        finally:
            peer.close()

    def load(self, path: Path, facts: MeasureFacts) -> MeasureFacts:
        return facts


BASELINE = BaselineStage()
