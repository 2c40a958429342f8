"""One verify-and-time path for everything a sweep times: a TVM variant on its session's
device, or the same compressed model in a baseline runtime (PyTorch, ONNX Runtime).

The timing stages (`measure` for TVM variants, `baseline` for runtimes) are `TimedStage`s:
the executor does not call a compute of theirs in the sweep's own process. It hands the
entries of a model's variants to the timing worker (`dlas.runner.timing_groups`), a fresh
process that builds each variant's `Timed` subject through its stage (`TimedStage.subject`),
verifies it (`verify`), and times all of them interleaved, round by round
(`dlas.measure.rounds`). A run computing another function is reported and never timed.
A reduced-precision model's accuracy exists only in the runtime that runs it, so it is
measured there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlas.measure.load import CpuLoadProbe
from dlas.stages.base import Inputs, Job, Resources, StageEnv, StoredStage
from dlas.stages.facts import Agreement, MeasureFacts
from dlas.stages.outputs import ImportedModule
from dlas.sweep.grid import Point


class Timed(ABC):
    """A model loaded in some runtime, as the verify-and-time path needs it."""

    #: Runtime name as rows show it ("tvm", or the baseline option's name).
    runtime: str
    #: Intra-op threads the runtime runs with, when known.
    threads: int | None = None
    #: Identifies the variant among those timed with it (set by the worker).
    label: str = ""
    #: CPUs its threads are pinned to (empty: not pinned, or not on this host).
    cpus: Sequence[int] = ()
    #: The input timed (batch 1), set before timing.
    x: np.ndarray | None = None
    number: int = 1

    @abstractmethod
    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        """Logits (N, classes) float32, the samples run one by one at batch 1."""

    @abstractmethod
    def time_runs(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        """Seconds per inference of the batch-1 input `x`: `repeat` samples, each the mean
        of `number` calls, after `warmup` discarded ones."""

    def time(self, n: int, warmup: int) -> list[float]:
        """The sampler's call (`dlas.measure.rounds.Subject`)."""
        assert self.x is not None, "set the timed input first"
        return self.time_runs(self.x, n, self.number, warmup)

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

    def close(self) -> None:  # noqa: B027 - most subjects hold nothing process-wide
        """Release what the subject changed process-wide (threads, sessions)."""


@dataclass
class TimingContext:
    """What the timing worker gives every subject it builds: shared measurement sessions
    (one per target: a board over RPC serves one session at a time) and the CPUs threads
    are pinned to."""

    #: CPUs to pin threads to, one per thread (None: leave threads floating).
    cpus: list[int] | None = None
    sessions: dict[str, Any] = field(default_factory=dict)
    #: The workspace's artifact cache, where subjects keep what outlives one timing run
    #: (ONNX Runtime's float32 export); None: they keep nothing.
    cache_root: Path | None = None

    def session(self, target: Any) -> Any:
        """The open session measuring `target` (opened on first use)."""
        from dlas.measure.session import open_session
        from dlas.sweep.grid import canonical_json

        key = canonical_json({"target": target.tvm_target, "device": target.device,
                              "rpc": None if target.rpc is None else str(target.rpc)})
        if key not in self.sessions:
            self.sessions[key] = open_session(target, pin=self.cpus).__enter__()
        return self.sessions[key]

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()


def timing_key_inputs(point: Point) -> dict[str, Any]:
    """What a timing's key hashes, TVM variant or baseline: the sampling budgets, the
    threads, and the machine and hardware the samples are taken on."""
    from dlas.results.environment import machine_fingerprint
    from dlas.targets.resolve import resolve_target

    b = point.budgets
    target = resolve_target(point)
    return {"repeat": b.measure_repeat, "number": b.measure_number, "warmup": b.warmup,
            "threads": target.num_threads, "machine": machine_fingerprint(),
            "hardware": target.fingerprint}


def subject_label(point: Point) -> str:
    """How a variant is named among the variants of its model timed with it."""
    return " / ".join((point.compression.label, point.algorithms.label, point.tuning.label))


class TimedStage(StoredStage[MeasureFacts, MeasureFacts]):
    """A stage whose entry is a verified, timed run of one variant (`measure`,
    `baseline`). The executor computes these in the timing worker, a model's variants
    together (`dlas.runner.timing_groups`)."""

    facts_type = MeasureFacts
    resources = Resources(cpus=2, exclusive=True)

    @abstractmethod
    def subject(self, point: Point, inputs: Inputs, context: TimingContext,
                work_dir: Path) -> Timed | MeasureFacts:
        """The variant loaded and ready to run, or facts saying why it cannot run
        (`not_runnable`). Runs in the timing worker."""

    def compute(self, job: Job) -> MeasureFacts:
        raise RuntimeError(f"stage '{self.name}' is computed by the timing worker "
                           "(dlas.runner.timing_groups), not in the sweep's process")

    def load(self, path: Path, facts: MeasureFacts) -> MeasureFacts:
        return facts


def verify(subject: Timed, imported: ImportedModule, point: Point, inputs: Inputs,
           env: StageEnv, *, accuracy_available: bool) -> MeasureFacts:
    """Verify `subject` against the point's reference outputs and measure its accuracy
    where it computes in reduced precision; the facts, not yet timed."""
    from dlas.measure.verify import verify_outputs
    from dlas.stages.data import DATA

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
        with env.console.activity(f"accuracy in {where}"):
            facts.accuracy = subject.accuracy(inputs[DATA].test)
    ready_to_time(subject, imported, point)
    return facts


def ready_to_time(subject: Timed, imported: ImportedModule, point: Point) -> None:
    """What a verified subject is timed on: the first input, `measure_number` calls a
    sample."""
    subject.x = imported.inputs[:1]
    subject.number = point.budgets.measure_number


def reverify(subject: Timed, imported: ImportedModule, point: Point, prior: MeasureFacts
             ) -> MeasureFacts | None:
    """`prior`'s facts for `subject` when the same compiled artifact, checked in full
    before (`dlas.stages.verified`), still computes the reference's output for the first
    input; None when it does not (verify in full then)."""
    from dlas.measure.verify import verify_outputs

    precision = imported.facts.precision
    got = subject.run_batch1(imported.inputs[:1])
    check = verify_outputs(got, imported.outputs[:1], dtype=precision,
                           reference=imported.facts.reference,
                           output_step=imported.facts.output_step)
    if not check.passed:
        return None
    ready_to_time(subject, imported, point)
    return MeasureFacts(verification=prior.verification, fp32_agreement=prior.fp32_agreement,
                        accuracy=prior.accuracy, threads=subject.threads,
                        runtime_info=subject.info())


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
