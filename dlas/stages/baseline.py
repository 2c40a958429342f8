"""Stage `baseline`: a baseline point's one stage after import. The compressed model runs
in the baseline runtime (a `tuning` option tagged `baseline`: PyTorch, ONNX Runtime),
verified against the same reference outputs as the TVM variants and timed by the same
path, interleaved with them (`dlas.stages.timed`). A runtime that cannot run the model
says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlas.measure.load import CpuLoadProbe
from dlas.stages.base import Inputs
from dlas.stages.compress import COMPRESS
from dlas.stages.facts import MeasureFacts
from dlas.stages.import_model import IMPORT
from dlas.stages.timed import (
    Timed,
    TimedStage,
    TimingContext,
    dataset_accuracy,
    timing_key_inputs,
)
from dlas.sweep.grid import Point
from dlas.targets.resolve import resolve_target


class BaselineRun(Timed):
    """A baseline runtime's peer (`dlas.tuning.baselines.base.Peer`)."""

    def __init__(self, peer: Any, cpus: list[int] | None) -> None:
        self.peer = peer
        self.runtime = peer.runtime
        self.threads = peer.threads
        self.cpus = list(cpus or [])

    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        return self.peer.run_batch1(inputs)

    def time_runs(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        from dlas.tuning.baselines.base import time_peer

        bound = getattr(self, "_bound", None)
        if bound is None or bound[0] is not x:  # bind once per input, not per chunk
            bound = self._bound = (x, self.peer.bind(x))
        return time_peer(bound[1], repeat=repeat, number=number, warmup=warmup)

    def accuracy(self, dataset: Any) -> float:
        return dataset_accuracy(self.peer.run, dataset)

    def probe(self) -> CpuLoadProbe | None:
        return CpuLoadProbe(self.peer.threads)

    def info(self) -> dict[str, Any] | None:
        return self.peer.info()

    def mismatch_hint(self) -> str | None:
        return self.peer.mismatch_hint()

    def close(self) -> None:
        self.peer.close()


def baseline_threads(point: Point) -> int:
    from dlas.targets.host import available_cores

    return resolve_target(point).num_threads or available_cores()


class BaselineStage(TimedStage):
    name = "baseline"
    #: 3: timed in the timing worker, interleaved with the model's TVM variants, in
    #: rounds labelled with the vCPU placement; intra-op threads pinned.
    version = 3
    parent = "import"
    parent_field = "imported"
    reads = ("tuning", "targets")
    needs = ("data", "train", "compress", "import")
    code = ("measure", "stages/timed", "stages/verified", "tuning/baselines")
    libraries = ("onnxruntime", "torch")

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return {"runtime": point.tuning.identity(), "target": point.targets.identity(),
                **timing_key_inputs(point)}

    def subject(self, point: Point, inputs: Inputs, context: TimingContext,
                work_dir: Path) -> Timed | MeasureFacts:
        from dlas.tuning.baselines.base import BaselineModel, BaselineNotRunnable

        compressed = inputs[COMPRESS]
        imported = inputs[IMPORT]
        threads = baseline_threads(point)
        cpus = context.cpus[:threads] if context.cpus and len(context.cpus) >= threads \
            else None
        # the shape from the import's facts, not the data bundle: building the bundle in
        # a timing worker loaded the dataset (digits: scikit-learn's import, ~2 s) for a
        # shape, in every worker of every pass
        model = BaselineModel(
            compressed.model, imported.facts.precision, tuple(imported.facts.input_shape[1:]),
            threads, quantized_onnx=compressed.quantized_onnx(), work_dir=work_dir,
            info=compressed.facts.info or {}, cpus=cpus,
            export_cache=context.cache_root, device=resolve_target(point).device)
        try:
            peer = point.tuning.option.fn(point.tuning.params, model)
        except BaselineNotRunnable as exc:
            return MeasureFacts(not_runnable=str(exc))
        return BaselineRun(peer, cpus)


BASELINE = BaselineStage()
