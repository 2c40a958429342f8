"""The result row: one typed record per point of a sweep, and the definition of the SQL
table that stores it.

Every column is a field here, with its type and what it means; `dlas.results.store`
derives the table (`COLUMNS`) from these fields, the executors build rows through
`dlas.runner.rows`, and the console, `dlas results` and the report read fields by name.
A column that is misspelled anywhere is an error, not a silent `None`.

A row holds everything needed to interpret its number later without the cache: the
resolved config, the environment, accuracy (and where it was measured), the timing
figures with their confidence interval and the placement they were taken in (computed by
`dlas.results.latency` over the point's timing history), compile and tuning time, model
size and compression ratio, and the verification against the reference. Failed and
not-runnable points are rows too, with the error, so nothing a sweep tried is lost.
Baseline rows (PyTorch eager, ONNX Runtime) have the same columns: `tuning` and
`algorithm` name the runtime, `runtime_info` says how it was set up.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "failed", "verification_failed", "not_runnable"]
STATUSES: tuple[str, ...] = get_args(Status)


class ResultRow(BaseModel):
    """One point's result (see the module doc). Field order is column order."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    point_key: str
    #: The sweep that first wrote the row. Which sweeps a point belongs to is the
    #: `sweep_points` table: a point measured by one sweep is every listing sweep's too.
    sweep: str | None = None
    status: Status = "ok"
    dataset: str | None = None
    model: str | None = None
    compression: str | None = None
    algorithm: str | None = None
    tuning: str | None = None
    target: str | None = None
    #: What ran the point: 'tvm', or a baseline runtime ('pytorch', 'onnxruntime').
    backend: str | None = None
    #: The kind of device it ran on: 'cpu' or 'gpu'.
    device_kind: str | None = None
    #: The weights' format: 'dense' or 'csr'.
    weight_format: str | None = None
    accuracy: float | None = None
    #: 'pytorch' (float32: PyTorch computes what TVM runs) or the runtime that measured a
    #: reduced-precision model's accuracy ('tvm', 'onnxruntime', ...); None without one.
    accuracy_source: str | None = None
    #: int8: accuracy of the same quantized model in ONNX Runtime.
    ort_accuracy: float | None = None
    dense_accuracy: float | None = None
    #: Numeric format of the convolutions: float32, float16 or int8.
    precision: str | None = None
    #: The compression's ideal speedup (20 for 95% pruning, 2 for float16, 4 for int8).
    compression_ratio: float | None = None

    # -- timing: figures in `placement`, over every timing run of the point -------------
    #: Median of the samples (ms): the reported time.
    latency_median_ms: float | None = None
    #: 95% confidence interval of the median (hierarchical bootstrap over timing runs,
    #: rounds and samples; dlas.results.statistics).
    latency_ci_low_ms: float | None = None
    latency_ci_high_ms: float | None = None
    #: Where the next independent run of this point is expected to land (95%): the
    #: median widened by this machine's run-to-run drift for its runtime, never inside
    #: the CI above (dlas.results.drift). Rows of different invocations compare by it.
    next_run_low_ms: float | None = None
    next_run_high_ms: float | None = None
    #: The drift it was widened by, |log ratio| (0.05 is about 5%).
    next_run_drift: float | None = None
    #: What that drift rests on: 'this machine, 84 pairs' or 'prior, 12 of 30 pairs ...'.
    next_run_basis: str | None = None
    latency_mean_ms: float | None = None
    latency_std_ms: float | None = None
    latency_min_ms: float | None = None
    latency_max_ms: float | None = None
    #: Coefficient of variation of the samples (std / mean).
    latency_cv: float | None = None
    #: First and third quartiles of the samples (the IQR beside the median).
    latency_q1_ms: float | None = None
    latency_q3_ms: float | None = None
    #: The samples the figures are computed from (ms).
    latency_samples_ms: list[float] | None = None
    #: vCPU placement the figures were taken in (dlas.measure.placement): near, far,
    #: single (one thread), unknown (no probe: a board). Timings are only compared within
    #: one placement.
    placement: str | None = None
    #: Median core-to-core round trip over those rounds (ns).
    placement_round_trip_ns: float | None = None
    #: The same figures in every placement the point was timed in (JSON:
    #: placement -> median, ci_low, ci_high, samples, rounds, runs).
    latency_by_placement: dict[str, Any] | None = None
    #: The timing entry (`measure` or `baseline` stage key) whose runs the figures cover.
    timing_key: str | None = None
    #: Timing runs of this entry (the sweep's, then one per `dlas run --remeasure`).
    timing_runs: int | None = None
    #: Rounds (chunks of this variant) the figures resample.
    timing_rounds: int | None = None
    #: Chunks in `placement` left out as disturbed: slower than 1.10x the lower quartile
    #: of the variant's chunk medians (dlas.results.latency).
    disturbed_chunks: int | None = None
    #: Spread of the runs: largest over smallest per-run median in `placement`, minus 1.
    run_spread: float | None = None
    #: 1 when rounds taken on a busy machine had to be kept, or the confidence interval
    #: is wider than the sweep's budgets.ci_threshold (`noise_reason` says which).
    noisy: int | None = None
    noise_reason: str | None = None
    #: Rounds discarded and taken again because other processes kept the CPUs busy;
    #: rounds kept although it was busy; the most CPU others used in a kept round (cores).
    load_retries: int | None = None
    loaded_rounds: int | None = None
    load_other_cores: float | None = None
    #: How the samples were taken (JSON): policy, probes, events of every run.
    noise_log: dict[str, Any] | None = None
    measure_repeat: int | None = None
    threads: int | None = None

    # -- compile and tuning ------------------------------------------------------------
    compile_s: float | None = None
    #: Seconds per compile phase: import (shared by a model's variants), lower, fold,
    #: tune, schedule, codegen, export.
    compile_phases: dict[str, Any] | None = None
    tuning_s: float | None = None
    #: Trials MetaSchedule measured for this point; tasks tuned now vs reused from the
    #: target's tuning database; the per-task report.
    tuning_trials: int | None = None
    tasks_tuned: int | None = None
    tasks_reused: int | None = None
    tuning_report: dict[str, Any] | None = None
    #: The activation layout the model ran in (NCHW, NHWC, NCHW16c, ...): layer 4's
    #: data format, set by the algorithm's `layout` and the target's SIMD width.
    layout: str | None = None
    #: What keeping that layout took: convs in it, convs kept NCHW, reorders and where
    #: (`dlas.compiler.layout.LayoutReport`).
    layout_report: dict[str, Any] | None = None

    # -- the model ---------------------------------------------------------------------
    params: int | None = None
    nonzero_params: int | None = None
    macs: int | None = None
    sparsity: float | None = None
    size_bytes: int | None = None

    # -- verification ------------------------------------------------------------------
    verified: int | None = None
    #: What the output was verified against: 'pytorch', 'qdq' or 'onnxruntime'.
    verification_reference: str | None = None
    max_abs_diff: float | None = None
    top1_agreement: float | None = None
    #: Agreement with the float32 PyTorch model (differs from the above for int8).
    fp32_max_abs_diff: float | None = None
    fp32_top1_agreement: float | None = None
    conv_fallbacks: list[str] | None = None
    #: Baseline rows: the runtime, its version and settings (threads, model it ran).
    runtime_info: dict[str, Any] | None = None
    train_history: list[dict[str, Any]] | None = None
    compression_info: dict[str, Any] | None = None

    # -- what went wrong, and bookkeeping ------------------------------------------------
    error_stage: str | None = None
    error: str | None = None
    traceback: str | None = None
    #: Seconds this run spent computing each stage for the point.
    stage_seconds: dict[str, float] | None = None
    config: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    created_at: float | None = None
    updated_at: float | None = None

    @property
    def latency_iqr_ms(self) -> float | None:
        if self.latency_q1_ms is None or self.latency_q3_ms is None:
            return None
        return self.latency_q3_ms - self.latency_q1_ms

    @property
    def ci_relative_width(self) -> float | None:
        """Width of the median's interval as a fraction of the median."""
        lo, hi, med = self.latency_ci_low_ms, self.latency_ci_high_ms, self.latency_median_ms
        if lo is None or hi is None or not med:
            return None
        return (hi - lo) / med

    def update(self, **values: Any) -> ResultRow:
        """Set several fields (validated); returns the row."""
        for name, value in values.items():
            setattr(self, name, value)
        return self


def _base(annotation: Any) -> Any:
    """The type inside `X | None`."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _sql_type(annotation: Any) -> tuple[str, bool]:
    """(SQLite type, stored as JSON) of a field's annotation."""
    base = _base(annotation)
    origin = get_origin(base) or base
    if origin in (dict, list) or (isinstance(origin, type) and issubclass(origin, BaseModel)):
        return "TEXT", True
    if origin is bool or origin is int:
        return "INTEGER", False
    if origin is float:
        return "REAL", False
    return "TEXT", False


_HINTS = typing.get_type_hints(ResultRow)

#: The table's columns (name -> SQL type), in field order: the one definition.
COLUMNS: dict[str, str] = {
    name: ("TEXT PRIMARY KEY" if name == "point_key" else
           "TEXT NOT NULL" if name == "status" else _sql_type(_HINTS[name])[0])
    for name in ResultRow.model_fields
}
#: Columns stored as JSON text.
JSON_COLUMNS: frozenset[str] = frozenset(
    name for name in ResultRow.model_fields if _sql_type(_HINTS[name])[1])
