"""The verification bounds (`dlas.measure.verify`), by value.

int8's bound is settled by measurement (docs/quantization.md): correct evaluations of one
QDQ function differ by a few output steps where requantization rounds differently, and
that must pass; an output moved by many steps on average, or one logit far off, must not.
"""

from __future__ import annotations

import numpy as np

from dlas.measure.verify import verify_outputs

STEP = 8.0 / 127  # the uncalibrated output step
PEAK = 128 * STEP


def _logits(seed: int = 0) -> np.ndarray:
    """32 x 10 logits on the output grid, with the largest at PEAK."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-60, 60, size=(32, 10))
    q[np.arange(32), rng.integers(0, 10, size=32)] = 128  # a clear winner per input
    return q * STEP


def test_rounding_flips_of_a_few_steps_pass() -> None:
    ref = _logits()
    got = ref.copy()
    rng = np.random.default_rng(1)
    flips = rng.random(ref.shape) < 0.2  # a fifth of the logits one step off
    got[flips] += STEP * rng.choice([-1, 1], size=int(flips.sum()))
    got[3, 4] += 7 * STEP  # the flake's 7 steps (5.5% of the largest logit)
    check = verify_outputs(got, ref, "int8", "qdq", output_step=STEP)
    assert check.passed, check.explain()
    assert check.mean_abs_diff is not None and check.mean_abs_diff < check.mean_atol


def test_a_shift_of_every_logit_fails_on_the_mean() -> None:
    ref = _logits()
    got = ref + 2 * STEP  # under the largest-difference bound everywhere
    check = verify_outputs(got, ref, "int8", "qdq", output_step=STEP)
    assert np.abs(got - ref).max() <= check.atol
    assert not check.passed
    assert "mean |diff|" in check.explain()


def test_one_logit_far_off_fails_on_the_largest_difference() -> None:
    ref = _logits()
    got = ref.copy()
    got[0, 0] += 0.15 * PEAK
    assert not verify_outputs(got, ref, "int8", "qdq", output_step=STEP).passed


def test_float_precisions_have_no_mean_bound() -> None:
    ref = _logits()
    check = verify_outputs(ref + 1e-4, ref)
    assert check.passed and check.mean_atol is None
    assert check.mean_abs_diff is not None and abs(check.mean_abs_diff - 1e-4) < 1e-9
    assert not verify_outputs(ref + 0.05, ref).passed
