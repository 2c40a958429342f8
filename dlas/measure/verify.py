"""Correct before fast: every compiled variant is compared with the PyTorch reference."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: (rtol, atol relative to the largest reference magnitude) per output dtype.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-3, 1e-3),
    "float16": (2e-2, 2e-2),
}


@dataclass
class Verification:
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    top1_agreement: float
    rtol: float
    atol: float
    samples: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def explain(self) -> str:
        return (f"compiled output differs from PyTorch: max |diff| {self.max_abs_diff:.3g} "
                f"exceeds tolerance (rtol {self.rtol:g}, atol {self.atol:.3g}); top-1 agreement "
                f"{self.top1_agreement:.1%} over {self.samples} inputs")


def verify_outputs(got: np.ndarray, ref: np.ndarray, dtype: str = "float32") -> Verification:
    """Compare logits elementwise (allclose) and by top-1 class.

    The tolerance scales with the reference's magnitude so large logits are not held to an
    absolute bound meant for small ones; a kernel that computes a different function misses
    it by orders of magnitude.
    """
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        raise ValueError(f"compiled output shape {got.shape} != PyTorch output shape {ref.shape}")
    rtol, atol_rel = TOLERANCES.get(dtype, TOLERANCES["float32"])
    atol = atol_rel * max(1.0, float(np.abs(ref).max()))
    diff = np.abs(got - ref)
    finite = bool(np.isfinite(got).all())
    passed = finite and bool(np.all(diff <= atol + rtol * np.abs(ref)))
    rel = diff / np.maximum(np.abs(ref), 1e-12)
    agreement = float(np.mean(got.argmax(axis=-1) == ref.argmax(axis=-1))) if got.ndim > 1 else 1.0
    return Verification(
        passed=passed,
        max_abs_diff=float(diff.max()) if finite else float("inf"),
        max_rel_diff=float(rel.max()) if finite else float("inf"),
        top1_agreement=agreement,
        rtol=rtol,
        atol=atol,
        samples=int(got.shape[0]),
    )
