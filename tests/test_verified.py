"""A later timing pass of the same compiled artifact re-checks one input and carries the
full check's figures (`dlas.stages.verified`, `dlas.stages.timed.reverify`): kept only
when passed, written whole, read back as the same facts; a re-check that fails gives
None, so the worker verifies in full. The sweep-level effect (a second pass finds the
record and the row keeps its figures) is in tests/test_measurement.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from dlas.stages import verified
from dlas.stages.facts import Agreement, ImportFacts, MeasureFacts
from dlas.stages.outputs import ImportedModule
from dlas.stages.timed import Timed, reverify


def passed(diff: float = 1e-6) -> MeasureFacts:
    return MeasureFacts(verification={"passed": True, "max_abs_diff": diff,
                                      "top1_agreement": 1.0, "reference": "pytorch"},
                        fp32_agreement=Agreement(max_abs_diff=diff, top1_agreement=1.0),
                        accuracy=0.93, samples_ms=[1.0, 2.0], threads=2)


def test_a_passed_check_is_kept_and_read_back_without_its_timing(tmp_path: Path) -> None:
    verified.save(tmp_path, "measure", "k1", passed())
    back = verified.load(tmp_path, "measure", "k1")
    assert back is not None and back.passed
    assert back.verification == passed().verification and back.accuracy == 0.93
    assert back.fp32_agreement == passed().fp32_agreement
    assert back.samples_ms is None and back.threads is None  # figures only
    assert verified.load(tmp_path, "measure", "other") is None
    assert verified.load(tmp_path, "baseline", "k1") is None
    assert not list((tmp_path / verified.FOLDER).glob("*.tmp"))


def test_a_failed_check_or_a_damaged_record_is_not_used(tmp_path: Path) -> None:
    failed = MeasureFacts(verification={"passed": False, "max_abs_diff": 3.0})
    verified.save(tmp_path, "measure", "bad", failed)
    assert not verified.record_path(tmp_path, "measure", "bad").exists()
    path = verified.record_path(tmp_path, "measure", "torn")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"verification": {"pass')
    assert verified.load(tmp_path, "measure", "torn") is None


class Fixed(Timed):
    """A subject whose outputs are `out` (row by row)."""

    runtime = "tvm"

    def __init__(self, out: np.ndarray) -> None:
        self.out, self.calls = out, 0

    def run_batch1(self, inputs: np.ndarray) -> np.ndarray:
        self.calls += len(inputs)
        return self.out[:len(inputs)]

    def time_runs(self, x: np.ndarray, repeat: int, number: int, warmup: int) -> list[float]:
        return [0.001] * repeat

    def accuracy(self, dataset: Any) -> float:
        raise AssertionError("a re-check measures no accuracy")


def test_reverify_runs_one_input_and_carries_the_full_checks_figures() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(8, 10)).astype(np.float32)
    imported = ImportedModule(model=None, inputs=rng.normal(size=(8, 3, 4, 4)), outputs=ref,
                              fp32_outputs=ref, facts=ImportFacts(
                                  input_shape=[1, 3, 4, 4], precision="float32",
                                  reference="pytorch"))
    point: Any = SimpleNamespace(budgets=SimpleNamespace(measure_number=3))
    same = Fixed(ref.copy())
    facts = reverify(same, imported, point, passed(2e-6))
    assert facts is not None and facts.passed and same.calls == 1
    assert facts.verification == passed(2e-6).verification and facts.accuracy == 0.93
    assert same.x is not None and same.x.shape == (1, 3, 4, 4) and same.number == 3
    wrong = Fixed(ref + 1.0)  # another function: verify in full, which will say so
    assert reverify(wrong, imported, point, passed()) is None
