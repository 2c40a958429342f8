"""What each stored stage writes to its cache entry's `meta.json`, as typed records.

The facts are the interface between stages and from stages to the result row: a stage
returns its facts from `compute`, the executor stores them, and downstream stages and the
row read them by attribute. Unknown keys in an entry (the executor's own `stage`, `key`,
`span`) are ignored, and every field an older entry of the same stage version may lack has
a default, so entries cached before this module existed load unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dlas.measure.record import TimingRun


class Facts(BaseModel):
    """Facts every stored stage entry has: how long its compute took."""

    model_config = ConfigDict(extra="ignore")

    #: Seconds the stage's compute took (set by the executor, not by the stage).
    seconds: float | None = None

    def to_meta(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class TrainFacts(Facts):
    #: Test accuracy; None for a pretrained option whose real weights were not loaded.
    accuracy: float | None
    params: int
    macs: int
    #: Per-epoch training metrics (empty for a pretrained model).
    history: list[dict[str, Any]] = Field(default_factory=list)
    pretrained: bool = False
    weights_loaded: bool | None = None
    #: What the training arithmetic was: float32, or bfloat16 autocast
    #: (`Budgets.train_precision`).
    fit_precision: str = "float32"


class Deployment(BaseModel):
    """How a compressed model is deployed when it is not a float32 PyTorch module."""

    model_config = ConfigDict(extra="ignore")

    #: int8: file name of the quantized (QDQ) ONNX model in the entry.
    onnx: str | None = None
    #: float16: the accumulator dtype.
    accumulate: str | None = None


class CompressFacts(Facts):
    info: dict[str, Any]
    #: float32, float16 or int8: what the deployed model computes in.
    precision: str
    #: PyTorch's accuracy for a float32 result; None where it is measured later (reduced
    #: precision, in the deployed runtime) or unavailable.
    accuracy: float | None = None
    #: int8: accuracy of the quantized model in ONNX Runtime.
    ort_accuracy: float | None = None
    dense_accuracy: float | None = None
    params: int
    nonzero_params: int
    macs: int
    sparsity: float | None = None
    size_bytes: int
    deployment: Deployment | None = None


class ImportFacts(Facts):
    input_shape: list[int]
    precision: str
    #: What the compiled model is verified against: "pytorch" or "qdq".
    reference: str
    conv_dtypes: list[list[str]] = Field(default_factory=list)
    #: Convs that do not compute in the deployed precision, one note each.
    precision_fallbacks: list[str] = Field(default_factory=list)
    int8_convs: dict[str, Any] | None = None
    #: int8: the output quantization step (the verification tolerance's unit).
    output_step: float | None = None


class CompileFacts(Facts):
    #: File name of the exported library in the entry.
    executable: str
    fallbacks: list[str] = Field(default_factory=list)
    schedule_warnings: list[str] = Field(default_factory=list)
    conv_count: int
    #: Compile seconds without tuning.
    compile_s: float
    tuning_s: float = 0.0
    #: The tuning hook's summary (trials, tasks tuned and reused, per-task report).
    tuning: dict[str, Any] | None = None
    tvm_target: dict[str, Any]
    #: Seconds per compile phase; `import` is the (shared) import stage's.
    phases: dict[str, float | None] = Field(default_factory=dict)
    folded: dict[str, Any] = Field(default_factory=dict)
    #: The activation layout (`dlas.compiler.layout.LayoutReport`); empty: NCHW.
    layout: dict[str, Any] = Field(default_factory=dict)
    #: The kernels' machine code: kept in the workspace under this key
    #: (`dlas.compiler.kernel_objects`), and linked from an earlier compile's when
    #: `kernels_reused` (a dense algorithm on another weight set of the same model).
    kernel_key: str | None = None
    kernels_reused: bool = False


class Agreement(BaseModel):
    model_config = ConfigDict(extra="ignore")

    max_abs_diff: float
    top1_agreement: float


class MeasureFacts(Facts):
    """A verified-and-timed run of the model: a TVM variant's or a baseline runtime's.

    A run whose output differs from the reference has `verification` with `passed` false
    and `error`, and no samples; a baseline runtime that cannot load the model has only
    `not_runnable`.
    """

    verification: dict[str, Any] | None = None
    fp32_agreement: Agreement | None = None
    error: str | None = None
    #: Accuracy measured in the runtime (reduced precision only).
    accuracy: float | None = None
    #: The samples of the run's own placement (`timing.placement`), pooled over rounds.
    samples_ms: list[float] | None = None
    #: Every round of the timing run (`dlas.measure.rounds`); None in entries written
    #: before rounds existed.
    timing: TimingRun | None = None
    #: Entries written before rounds existed: how their samples were collected.
    noise: dict[str, Any] | None = None
    threads: int | None = None
    #: Baselines: the runtime, its version and settings.
    runtime_info: dict[str, Any] | None = None
    not_runnable: str | None = None

    @property
    def passed(self) -> bool:
        return bool(self.verification and self.verification["passed"])
