"""One verify-and-time path for everything a sweep times: a TVM variant on its session's
device, or the same compressed model in a baseline runtime (PyTorch, ONNX Runtime).

The output on the import stage's verification inputs is checked against the reference
(`dlas.measure.verify`); a run computing another function is reported and never timed.
A reduced-precision model's accuracy exists only in the runtime that runs it, so it is
measured there. Samples are taken in chunks under the noise policy (`dlas.measure.sampling`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from dlas.measure.sampling import CpuLoadProbe
from dlas.stages.base import Job
from dlas.stages.facts import Agreement, MeasureFacts
from dlas.stages.outputs import ImportedModule


class Timed(ABC):
    """A model loaded in some runtime, as the verify-and-time path needs it."""

    #: Runtime name as rows show it ("tvm", or the baseline option's name).
    runtime: str
    #: Intra-op threads the runtime runs with, when known.
    threads: int | None = None
    #: Re-take a whole set of samples that disperses (for devices whose contention the
    #: load probe cannot observe).
    retake_on_cv: bool = False

    @abstractmethod
    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        """Logits (N, classes) float32, the samples run one by one at batch 1."""

    @abstractmethod
    def time(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        """Seconds per inference of the batch-1 input `x`: `repeat` samples, each the mean
        of `number` calls, after `warmup` discarded ones."""

    @abstractmethod
    def accuracy(self, dataset: Any) -> float:
        """Top-1 accuracy over a dataset, in this runtime."""

    def probe(self) -> CpuLoadProbe | None:
        """What watches this machine for other work while samples are taken."""
        return None

    def info(self) -> dict[str, Any] | None:
        """What identifies the runtime's setup in the row (baselines)."""
        return None

    def mismatch_hint(self) -> str | None:
        """What to do when the output fails verification, if the runtime knows a cause."""
        return None


def timing_key_inputs(point: Any) -> dict[str, Any]:
    """What a timing's key hashes, TVM variant or baseline: the sampling budgets, the
    threads, and the machine and hardware the samples are taken on."""
    from dlas.results.environment import machine_fingerprint
    from dlas.targets.resolve import resolve_target

    b = point.budgets
    target = resolve_target(point)
    return {"repeat": b.measure_repeat, "number": b.measure_number, "warmup": b.warmup,
            "threads": target.num_threads, "machine": machine_fingerprint(),
            "hardware": target.fingerprint}


def verify_and_time(subject: Timed, imported: ImportedModule, job: Job, *,
                    accuracy_available: bool) -> MeasureFacts:
    """Verify `subject` against the point's reference outputs, measure its accuracy where
    it computes in reduced precision, and time it."""
    from dlas.measure.sampling import NoisePolicy, collect_samples
    from dlas.measure.verify import verify_outputs
    from dlas.stages.data import DATA

    b = job.point.budgets
    console = job.env.console
    precision = imported.facts.precision
    step = imported.facts.output_step
    got = subject.run_batch1(imported.inputs)
    verification = verify_outputs(got, imported.outputs, dtype=precision,
                                  reference=imported.facts.reference, output_step=step)
    fp32 = verify_outputs(got, imported.fp32_outputs, dtype=precision, output_step=step)
    facts = MeasureFacts(
        verification=verification.as_dict(), threads=subject.threads,
        runtime_info=subject.info(),
        fp32_agreement=Agreement(max_abs_diff=fp32.max_abs_diff,
                                 top1_agreement=fp32.top1_agreement))
    if not verification.passed:
        prefix = "" if subject.runtime == "tvm" else f"{subject.runtime}: "
        hint = subject.mismatch_hint()
        facts.error = prefix + verification.explain() + (f"; {hint}" if hint else "")
        return facts  # a run computing another function is not timed
    if precision != "float32" and accuracy_available:
        where = "the compiled model" if subject.runtime == "tvm" else subject.runtime
        with console.activity(f"accuracy in {where}"):
            facts.accuracy = subject.accuracy(job.inputs[DATA].test)
    x = imported.inputs[:1]
    with console.measuring(b.measure_repeat) as advance:
        sampled = collect_samples(
            lambda n, warm: subject.time(x, n, b.measure_number, warm),
            b.measure_repeat, warmup=b.warmup, probe=subject.probe(),
            policy=NoisePolicy.from_budgets(b, retake_on_cv=subject.retake_on_cv),
            advance=advance, say=console.note)
    facts.samples_ms = sampled.samples_ms
    facts.noise = sampled.record()
    return facts


def dataset_accuracy(run: Any, dataset: Any, batch_size: int = 256) -> float:
    """Top-1 accuracy of `run(x) -> logits` over a dataset (batched: the number does not
    depend on the batch size, only the time to get it)."""
    import torch
    from torch.utils.data import DataLoader

    correct = seen = 0
    for x, y in DataLoader(dataset, batch_size=batch_size, num_workers=0):
        logits = run(x.numpy())
        correct += int((logits.argmax(axis=1) == torch.as_tensor(y).numpy()).sum())
        seen += len(y)
    if seen == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    return correct / seen
