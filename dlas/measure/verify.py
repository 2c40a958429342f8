"""Correct before fast: every compiled variant is compared with the function it must compute.

That is the PyTorch model's output for float32 and float16 variants, and for int8 the
quantized model's literal QDQ function (each Quantize/DequantizeLinear and float op as the
ONNX graph writes it, evaluated by ONNX Runtime with graph optimizations off: the same on
every CPU, unlike its fused int8 kernels; see dlas.compression.int8). PyTorch's float
output is only what int8 approximates, recorded beside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: (rtol, atol relative to the largest reference magnitude) per precision.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-3, 1e-3),
    "float16": (2e-2, 2e-2),
    # int8: the QDQ function is defined only up to requantization rounding. Where a value
    # falls on a rounding boundary, evaluations that sum in another order (ONNX Runtime's
    # float conv, TVM's float conv, TVM's exact int32 conv) round it to neighbouring
    # steps, and the flip travels through the layers. Measured on a trained MobileNetV2
    # (57 int8 convs, digits, 360 inputs; docs/quantization.md): those three correct
    # evaluations differ by up to 5 output steps (3.9% of the largest logit; 5.5% was seen
    # once), 0.17-0.24 steps on average. So the largest difference may reach 10% of the
    # largest logit (never less than INT8_OUTPUT_STEPS steps), and the mean difference
    # must stay within INT8_MEAN_STEPS steps: a wrong kernel moves the typical logit by
    # many steps (the first conv's top kernel row zeroed: 22.6 on average, 131 at most).
    "int8": (0.0, 1e-1),
}
#: int8: differences of this many output quantization steps are always tolerated.
INT8_OUTPUT_STEPS = 3
#: int8: the mean |difference| may be this many output steps (or 1% of the largest logit).
INT8_MEAN_STEPS = 1.0
INT8_MEAN_OF_PEAK = 1e-2

REFERENCE_NAMES = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime",
                   "qdq": "the QDQ model's literal function"}


@dataclass
class Verification:
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    top1_agreement: float
    rtol: float
    atol: float
    samples: int
    #: What the output was compared with: "pytorch", "qdq" or "onnxruntime".
    reference: str = "pytorch"
    #: Mean |difference|, and its bound where the precision has one (int8).
    mean_abs_diff: float | None = None
    mean_atol: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def explain(self) -> str:
        name = REFERENCE_NAMES.get(self.reference, self.reference)
        mean = ""
        if self.mean_atol is not None and self.mean_abs_diff is not None:
            mean = (f", mean |diff| {self.mean_abs_diff:.3g} (bound {self.mean_atol:.3g})")
        return (f"compiled output differs from {name}: max |diff| {self.max_abs_diff:.3g} "
                f"(tolerance: rtol {self.rtol:g}, atol {self.atol:.3g}){mean}; top-1 "
                f"agreement {self.top1_agreement:.1%} over {self.samples} inputs")


def verify_outputs(got: np.ndarray, ref: np.ndarray, dtype: str = "float32",
                   reference: str = "pytorch", output_step: float | None = None) -> Verification:
    """Compare logits elementwise (allclose) and by top-1 class.

    The tolerance scales with the reference's magnitude so large logits are not held to an
    absolute bound meant for small ones; a kernel that computes a different function misses
    it by orders of magnitude. `dtype` picks the tolerance (float32, float16, int8). For
    int8, `output_step` is the output's quantization step (the scale of the model's final
    dequantize): logits are multiples of it, so the bound is counted in steps, without the
    float bound's floor of 1 (int8 logits may all be far below 1); int8 also bounds the
    mean difference (see `TOLERANCES`).
    """
    if dtype not in TOLERANCES:
        raise ValueError(f"no verification tolerance for {dtype!r}; known: {sorted(TOLERANCES)}")
    if reference not in REFERENCE_NAMES:
        raise ValueError(f"unknown reference {reference!r}; known: {sorted(REFERENCE_NAMES)}")
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        name = REFERENCE_NAMES[reference]
        raise ValueError(f"compiled output shape {got.shape} != {name} output shape {ref.shape}")
    rtol, atol_rel = TOLERANCES[dtype]
    peak = float(np.abs(ref).max()) if ref.size else 0.0
    if dtype == "int8":
        atol = max(atol_rel * peak, INT8_OUTPUT_STEPS * (output_step or 0.0), 1e-12)
    else:
        atol = atol_rel * max(1.0, peak)
    diff = np.abs(got - ref)
    finite = bool(np.isfinite(got).all())
    passed = finite and bool(np.all(diff <= atol + rtol * np.abs(ref)))
    mean = float(diff.mean()) if finite and diff.size else None
    mean_atol = None
    if dtype == "int8":
        mean_atol = max(INT8_MEAN_OF_PEAK * peak, INT8_MEAN_STEPS * (output_step or 0.0),
                        1e-12)
        passed = passed and mean is not None and mean <= mean_atol
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
        reference=reference,
        mean_abs_diff=mean,
        mean_atol=mean_atol,
    )
