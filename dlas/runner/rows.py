"""The result row of a point, from its stages' facts: one path for TVM variants and
baselines, and for every executor.

Facts known before anything runs are written up front (what ran it, on what kind of
device, with which weight format), so the report never has to guess them from names. A
timed point's latency columns come from its timing history (`dlas.results.latency`): the
run its timing entry holds is recorded first, then the figures are computed over every
run of that entry.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from dlas.measure.placement import LOCAL_PLACEMENTS
from dlas.measure.record import TimingRun
from dlas.results import drift_record
from dlas.results.drift import next_run_range, prior, row_drift
from dlas.results.environment import capture_environment
from dlas.results.latency import (
    chunk_spread,
    invocation_figures,
    latency_columns,
    legacy_run,
    run_figures,
)
from dlas.results.row import ResultRow
from dlas.results.store import ResultStore
from dlas.stages.facts import CompileFacts, CompressFacts, ImportFacts, MeasureFacts, TrainFacts
from dlas.sweep.grid import Point

log = logging.getLogger(__name__)

_LAYER_COLUMNS = {"dataset": "datasets", "model": "models", "compression": "compression",
                  "algorithm": "algorithms", "tuning": "tuning", "target": "targets"}

#: Algorithm-option tag of a sparse (CSR) weight format.
CSR_TAG = "csr"


def point_facts(point: Point) -> dict[str, Any]:
    """What ran the point (`backend`: tvm, or the baseline runtime), on which kind of
    device (`device_kind`: cpu or gpu) and with which weights (`weight_format`)."""
    from dlas.targets.resolve import resolve_target

    try:
        device = resolve_target(point).device
    except Exception:  # noqa: BLE001 - a target that cannot resolve: its row says why
        device = None
    return {
        "backend": runtime_of(point),
        "device_kind": None if device is None else ("cpu" if device == "cpu" else "gpu"),
        "weight_format": "csr" if (CSR_TAG in point.algorithms.tags
                                   and not point.is_baseline) else "dense",
    }


def new_row(point: Point, sweep: str) -> ResultRow:
    """The columns every row has, before any stage ran."""
    return ResultRow(
        point_key=point.key, sweep=sweep,
        **{col: point.labels()[layer] for col, layer in _LAYER_COLUMNS.items()},
        config={
            "choices": {layer: c.identity() for layer, c in point.choices.items()},
            "budgets": point.budgets.model_dump(mode="json"),
        },
        environment=capture_environment(),
        measure_repeat=point.budgets.measure_repeat,
        **point_facts(point),
    )


def compile_columns(compiled: CompileFacts) -> dict[str, Any]:
    """Compile and tuning time, and what tuning did: trials measured, tasks tuned vs
    reused from the target's database, and the per-task report."""
    columns: dict[str, Any] = {"compile_s": compiled.compile_s, "tuning_s": compiled.tuning_s,
                               "compile_phases": compiled.phases,
                               "layout": compiled.layout.get("layout", "NCHW"),
                               "layout_report": compiled.layout or None}
    tuning = compiled.tuning
    if tuning:
        columns.update(tuning_trials=tuning["trials"], tasks_tuned=tuning["tuned"],
                       tasks_reused=tuning["reused"], tuning_report=tuning)
    return columns


def measured_columns(compressed: CompressFacts, trained: TrainFacts,
                     measured: MeasureFacts, runtime: str) -> dict[str, Any]:
    """The columns every measured point has, TVM variant or baseline: the model's facts,
    its accuracy and the verification of what `runtime` computed.

    float32: PyTorch computes what the runtime does (verified), so its accuracy stands;
    reduced precision: only the deployed runtime computes that function, so the accuracy
    is the one measured there.
    """
    precision = compressed.precision
    accuracy, source = compressed.accuracy, "pytorch"
    if precision != "float32":
        accuracy, source = measured.accuracy, runtime
    verification = measured.verification or {}
    fp32 = measured.fp32_agreement
    info = compressed.info
    ratio = info.get("compression_ratio")
    return dict(
        accuracy=accuracy,
        accuracy_source=source if accuracy is not None else None,
        ort_accuracy=compressed.ort_accuracy,
        dense_accuracy=trained.accuracy,
        precision=precision,
        compression_ratio=None if ratio is None else float(ratio),
        params=compressed.params, nonzero_params=compressed.nonzero_params,
        macs=compressed.macs, sparsity=compressed.sparsity,
        size_bytes=compressed.size_bytes,
        train_history=trained.history,
        compression_info=info,
        threads=measured.threads,
        runtime_info=measured.runtime_info,
        verified=int(bool(verification.get("passed"))),
        verification_reference=verification.get("reference", "pytorch"),
        max_abs_diff=verification.get("max_abs_diff"),
        top1_agreement=verification.get("top1_agreement"),
        fp32_max_abs_diff=fp32.max_abs_diff if fp32 else None,
        fp32_top1_agreement=fp32.top1_agreement if fp32 else None,
    )


def failed_row(row: ResultRow, stage: str | None, error: str | None,
               traceback: str | None) -> ResultRow:
    """A point whose `stage` raised (or whose upstream did)."""
    return row.update(status="failed", error_stage=stage, error=error, traceback=traceback)


def unmeasurable_row(row: ResultRow, reason: str | None, compiled: CompileFacts) -> ResultRow:
    """A point compiled (and cached) for a target nothing here can run."""
    return row.update(status="not_runnable", error_stage="measure", error=reason,
                      **compile_columns(compiled))


def timing_run_of(measured: MeasureFacts) -> TimingRun:
    """The timing run a timing entry holds (an entry older than rounds: one legacy run)."""
    if measured.timing is not None:
        return measured.timing
    return legacy_run(measured.samples_ms or [], noise=measured.noise)


def finish_row(row: ResultRow, point: Point, trained: TrainFacts,
               compressed: CompressFacts, imported: ImportFacts,
               compiled: CompileFacts | None, measured: MeasureFacts,
               history: list[TimingRun] | None = None,
               timing_key: str | None = None) -> ResultRow:
    """Fill a row from a point's facts; `compiled` is None for a baseline point.
    `history`: every timing run of the point's timing entry `timing_key` (default: the
    entry's own run)."""
    stage = "baseline" if compiled is None else "measure"
    if measured.not_runnable is not None:
        return row.update(status="not_runnable", error_stage=stage,
                          error=f"tuning '{point.tuning.name}': {measured.not_runnable}")
    row.update(**measured_columns(compressed, trained, measured,
                                  "tvm" if compiled is not None else point.tuning.name))
    if compiled is not None:
        row.update(**compile_columns(compiled),
                   conv_fallbacks=imported.precision_fallbacks + compiled.fallbacks)
    if not measured.passed:
        return row.update(status="verification_failed", error_stage=stage,
                          error=measured.error)
    runs = history or [timing_run_of(measured)]
    row.update(status="ok", timing_key=timing_key,
               **latency_columns(runs, point.budgets.ci_threshold))
    return row.update(**next_run_columns(row, runs))


def runtime_of(point: Point) -> str:
    """'tvm', or the baseline's runtime ('onnxruntime', 'pytorch')."""
    return point.tuning.name if point.is_baseline else "tvm"


def next_run_columns(row: ResultRow, runs: Sequence[TimingRun] = ()) -> dict[str, Any]:
    """Where the next independent run lands (`dlas.results.drift`): this machine's
    drift for timings taken here, the prior for a board's (its own drift is not kept),
    never narrower than the spread of the row's own chunks in its placement (`runs`)."""
    runtime = row.backend or "tvm"
    assert row.latency_median_ms is not None
    machine = (drift_record.machine_drift(runtime) if row.placement in LOCAL_PLACEMENTS
               else prior(runtime))
    spread = chunk_spread(runs, row.placement) if runs and row.placement else None
    drift = row_drift(machine, spread)
    low, high = next_run_range(row.latency_median_ms, row.latency_ci_low_ms,
                               row.latency_ci_high_ms, drift)
    return {"next_run_low_ms": low, "next_run_high_ms": high,
            "next_run_drift": drift.half_width, "next_run_basis": drift.basis}


def record_timing(store: ResultStore, point: Point, timing_key: str,
                  measured: MeasureFacts) -> list[TimingRun]:
    """Add the entry's timing run to the point's history; return the whole history of
    this entry (what the row's figures are computed over)."""
    run = None
    if measured.passed and (measured.timing is not None or measured.samples_ms):
        run = timing_run_of(measured)
        store.add_timing_run(point.key, timing_key, run)
    history = store.timing_runs(point.key, timing_key)
    if run is not None:
        keep_figure(point, timing_key, run, history)
    return history


def keep_figure(point: Point, timing_key: str, run: TimingRun,
                history: Sequence[TimingRun] = ()) -> None:
    """Add what this invocation measured of the entry to the machine's drift record
    (`dlas.results.drift_record`): the figure of its runs in `run`'s placement pooled as
    the row pools them, one per invocation and placement (each pass replaces it), so that
    a pair is what two independent invocations' rows differ by (with three short passes,
    single runs differ more than rows do). A record that cannot be written costs the
    next-run ranges their own pairs, not the sweep."""
    if run.placement not in LOCAL_PLACEMENTS or not any(r.samples_ms for r in run.rounds):
        return
    mine = [r for r in history if r.placement == run.placement
            and r.started_at >= drift_record.INVOCATION_STARTED] or [run]
    try:
        fig = invocation_figures(mine, run.placement) or run_figures(run)
        drift_record.add_figure(timing_key, f"{drift_record.INVOCATION}-{run.placement}",
                                runtime_of(point), run.placement, run.started_at, fig.median)
    except (OSError, sqlite3.Error) as exc:
        log.warning("drift record %s not written (%s)", drift_record.record_path(), exc)
