"""The contract of a compression option (layer 3).

A compression option is `fn(params, model, ctx) -> CompressionResult`. It receives a copy
of the trained dense model, may fine-tune it through `ctx`, and returns the compressed
model plus facts about it (its sparsity, the levels it tried, its `compression_ratio`, ...).

Most options return a float32 PyTorch model, which the runner imports into TVM as is.
Reduced-precision options also say how the model is *deployed* (`deployment`): converted
to float16 by TVM, or replaced by a quantized ONNX model whose convs TVM runs in int8.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dlas.datasets.base import DatasetBundle
from dlas.sweep.config import Budgets

if TYPE_CHECKING:
    from dlas.models.training import FitSettings


@dataclass
class CompressionContext:
    bundle: DatasetBundle
    budgets: Budgets
    #: Test accuracy of the dense model; None when it has none worth reporting (a
    #: "pretrained" model option whose real weights are not on this machine).
    dense_accuracy: float | None
    #: Batch size, data fraction, seed, a checkpoint dir that survives interruptions
    #: (so fine-tuning resumes mid-way) and per-epoch progress reporting.
    fit_settings: FitSettings
    evaluate: Callable[[torch.nn.Module], float] = field(repr=False)
    #: `fine_tune(model, epochs)`: the training recipe at the sweep's fine-tuning LR.
    fine_tune: Callable[[torch.nn.Module, int], torch.nn.Module] = field(repr=False)
    #: Name of the model option (e.g. "resnet18"), for per-model settings such as elbows.
    model_name: str = ""


@dataclass(frozen=True)
class Float16Conversion:
    """Deploy the returned PyTorch model converted to float16 by TVM at import
    (`relax.transform.ToMixedPrecision`); `accumulate` is the conv/matmul accumulator."""

    accumulate: str = "float32"

    def __post_init__(self) -> None:
        if self.accumulate not in ("float16", "float32"):
            raise ValueError(f"accumulate must be float16 or float32, got {self.accumulate!r}")


@dataclass(frozen=True)
class QuantizedOnnx:
    """Deploy this quantized ONNX model (QDQ format, serialized) instead of the PyTorch
    model, which stays the float32 reference it was quantized from. TVM imports it with
    its convs as int8 x int8 -> int32 (`dlas.compiler.quantized`)."""

    model: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.model, bytes) or not self.model:
            raise ValueError("QuantizedOnnx.model must be the serialized ONNX model (bytes)")


#: The ways a compressed model can be deployed other than as a float32 PyTorch model.
Deployment = Float16Conversion | QuantizedOnnx


@dataclass
class CompressionResult:
    model: torch.nn.Module
    #: JSON-serializable facts stored with the result (e.g. {"levels": [...]}). The key
    #: "compression_ratio" (ideal speedup: 20 for 95% pruning, 2 for float16, 4 for int8)
    #: becomes its own results column.
    info: dict[str, Any] = field(default_factory=dict)
    #: None: deploy `model` as it is (float32).
    deployment: Deployment | None = None
    #: What the user must know about this result (e.g. pruning levels left without
    #: fine-tuning): printed by the runner and recorded in the row's compression info.
    warnings: list[str] = field(default_factory=list)

    @property
    def precision(self) -> str:
        """The numeric format the deployed model computes its convolutions in."""
        if isinstance(self.deployment, Float16Conversion):
            return "float16"
        if isinstance(self.deployment, QuantizedOnnx):
            return "int8"
        if self.deployment is None:
            return "float32"
        raise TypeError(f"unknown deployment {type(self.deployment).__name__}; "
                        "expected Float16Conversion, QuantizedOnnx or None")
