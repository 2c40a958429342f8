"""The results database: embedded SQLite, one row per point of a sweep.

A row holds everything needed to interpret the number later without the cache: the full
resolved config, the environment, accuracy (and where it was measured), latency statistics
with raw samples, compile and tuning time, model size and compression ratio, and the
verification against the reference (PyTorch, or ONNX Runtime for int8 models). Failed and blocked
points are rows too, with the error, so nothing a sweep tried is lost.

Baseline rows (PyTorch eager, ONNX Runtime) have the same columns: `tuning` and `algorithm`
name the runtime, `runtime_info` says how it was set up, compile and tuning times are empty.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dlas.results.health import DamagedDatabaseError, check_database, is_damage

__all__ = ["COLUMNS", "DamagedDatabaseError", "ResultStore", "latency_columns"]

STATUSES = ("ok", "failed", "verification_failed", "not_runnable")

COLUMNS: dict[str, str] = {
    "point_key": "TEXT PRIMARY KEY",
    "sweep": "TEXT",
    "status": "TEXT NOT NULL",
    "dataset": "TEXT",
    "model": "TEXT",
    "compression": "TEXT",
    "algorithm": "TEXT",
    "tuning": "TEXT",
    "target": "TEXT",
    #: What ran the point: 'tvm', or a baseline runtime ('pytorch', 'onnxruntime').
    "backend": "TEXT",
    #: The kind of device it ran on: 'cpu' or 'gpu'.
    "device_kind": "TEXT",
    #: The weights' format: 'dense' or 'csr'.
    "weight_format": "TEXT",
    "accuracy": "REAL",
    #: 'pytorch' (float32: PyTorch computes what TVM runs) or 'tvm' (float16/int8: measured
    #: on the compiled module), or a baseline's runtime ('pytorch', 'onnxruntime') for its
    #: reduced-precision rows; NULL when no accuracy is available.
    "accuracy_source": "TEXT",
    #: int8: accuracy of the same quantized model in ONNX Runtime.
    "ort_accuracy": "REAL",
    "dense_accuracy": "REAL",
    #: numeric format of the convolutions: float32, float16 or int8.
    "precision": "TEXT",
    #: the compression's ideal speedup (20 for 95% pruning, 2 for float16, 4 for int8).
    "compression_ratio": "REAL",
    "latency_median_ms": "REAL",
    "latency_mean_ms": "REAL",
    "latency_std_ms": "REAL",
    "latency_min_ms": "REAL",
    "latency_max_ms": "REAL",
    "latency_samples_ms": "TEXT",
    #: coefficient of variation of the samples (std / mean).
    "latency_cv": "REAL",
    #: first and third quartiles of the samples: the spread around the median (IQR).
    "latency_q1_ms": "REAL",
    "latency_q3_ms": "REAL",
    #: 1 when latency_cv exceeds the sweep's budgets.cv_threshold, or when samples taken
    #: while other processes kept the CPUs busy had to be kept (`noise_reason` says which).
    "noisy": "INTEGER",
    "noise_reason": "TEXT",
    #: chunks (or, without a load probe, whole sets) of samples re-taken because the
    #: machine was busy or the samples dispersed; samples kept although it was busy (the
    #: retry budget was spent); the most CPU other processes used, in cores, while kept
    #: samples were taken (NULL where no probe watched: a board, or an older row).
    "load_retries": "INTEGER",
    "loaded_samples": "INTEGER",
    "load_other_cores": "REAL",
    #: how the samples were obtained (JSON): the probe, the budget, every re-take.
    "noise_log": "TEXT",
    "measure_repeat": "INTEGER",
    "threads": "INTEGER",
    "compile_s": "REAL",
    #: Seconds per compile phase (JSON): import (the import stage, shared by a model's
    #: variants), lower, fold, tune, schedule, codegen, export.
    "compile_phases": "TEXT",
    "tuning_s": "REAL",
    #: Trials MetaSchedule measured for this point; tasks tuned now vs reused from the
    #: target's tuning database; the per-task report (JSON).
    "tuning_trials": "INTEGER",
    "tasks_tuned": "INTEGER",
    "tasks_reused": "INTEGER",
    "tuning_report": "TEXT",
    "params": "INTEGER",
    "nonzero_params": "INTEGER",
    "macs": "INTEGER",
    "sparsity": "REAL",
    "size_bytes": "INTEGER",
    "verified": "INTEGER",
    #: what the compiled output was verified against: 'pytorch' or 'onnxruntime' (int8).
    "verification_reference": "TEXT",
    "max_abs_diff": "REAL",
    "top1_agreement": "REAL",
    #: agreement with the float32 PyTorch model (differs from the above for int8).
    "fp32_max_abs_diff": "REAL",
    "fp32_top1_agreement": "REAL",
    "conv_fallbacks": "TEXT",
    #: baseline rows: the runtime, its version and settings (threads, model it ran).
    "runtime_info": "TEXT",
    "train_history": "TEXT",
    "compression_info": "TEXT",
    "error_stage": "TEXT",
    "error": "TEXT",
    "traceback": "TEXT",
    "stage_seconds": "TEXT",
    "config": "TEXT",
    "environment": "TEXT",
    "created_at": "REAL",
    "updated_at": "REAL",
}

#: Columns `dlas results` shows by default (the rest go to CSV). `latency_iqr_ms` is shown,
#: not stored: Q3 - Q1 of the samples, the spread that goes with the median.
SUMMARY_COLUMNS = [
    "status", "model", "compression", "algorithm", "tuning", "target", "accuracy",
    "sparsity", "latency_median_ms", "latency_iqr_ms", "latency_cv", "threads", "verified",
    "max_abs_diff", "compile_s", "error",
]

JSON_COLUMNS = {"latency_samples_ms", "noise_log", "tuning_report", "compile_phases",
                "conv_fallbacks", "train_history", "compression_info",
                "stage_seconds", "config", "environment", "runtime_info"}


def latency_columns(samples_ms: Iterable[float], cv_threshold: float,
                    noise: dict[str, Any] | None = None) -> dict[str, Any]:
    """The latency columns of a timed row: statistics of all samples (the median is the
    reported time, the quartiles its spread), and the noise flag, so a number from a busy
    machine says so.

    `noise` is how the samples were collected (`dlas.measure.sampling.Sampling.record`);
    a measurement cached before that record existed has none, and its load columns stay
    NULL (unknown), not 0.
    """
    samples = np.asarray(list(samples_ms), dtype=np.float64)
    if samples.size == 0:
        raise ValueError("a timed row needs at least one sample")
    mean, std = float(samples.mean()), float(samples.std())
    cv = std / mean if mean > 0 else None
    q1, q3 = (float(q) for q in np.percentile(samples, [25, 75]))
    reasons = []
    if cv is not None and cv > cv_threshold:
        reasons.append(f"cv {cv:.0%} > {cv_threshold:.0%}")
    loaded = (noise or {}).get("loaded_samples") or 0
    if loaded:
        cores = noise.get("other_cores_max")  # type: ignore[union-attr]
        busy = f" (other processes used up to {cores:.2f} cores)" if cores is not None else ""
        reasons.append(f"{loaded} of {samples.size} samples taken on a busy machine{busy}; "
                       "retry budget spent")
    return {
        "latency_median_ms": float(np.median(samples)),
        "latency_mean_ms": mean,
        "latency_std_ms": std,
        "latency_min_ms": float(samples.min()),
        "latency_max_ms": float(samples.max()),
        "latency_q1_ms": q1,
        "latency_q3_ms": q3,
        "latency_samples_ms": samples.tolist(),
        "latency_cv": cv,
        "noisy": None if cv is None and not loaded else int(bool(reasons)),
        "noise_reason": "; ".join(reasons) or None,
        "load_retries": None if noise is None else noise.get("retries"),
        "loaded_samples": None if noise is None else loaded,
        "load_other_cores": None if noise is None else noise.get("other_cores_max"),
        "noise_log": noise,
    }


class ResultStore:
    """The database at `path`, created if absent. A file that is not a readable results
    database raises `DamagedDatabaseError` before anything is written to it
    (`dlas.results.health`), and so does damage SQLite finds later."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        check_database(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path)
        self.conn.row_factory = sqlite3.Row
        try:
            with self._guard():
                cols = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS points ({cols})")
                existing = {r["name"] for r in self.conn.execute("PRAGMA table_info(points)")}
                for name, kind in COLUMNS.items():  # older databases gain new columns
                    if name not in existing:
                        self.conn.execute(
                            f"ALTER TABLE points ADD COLUMN {name} {kind.split()[0]}")
                self.conn.commit()
        except BaseException:
            self.conn.close()
            raise

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite's word for a damaged file, as `DamagedDatabaseError`."""
        try:
            yield
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise DamagedDatabaseError(self.path, f"SQLite cannot read it: {exc}") from exc
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def upsert(self, row: dict[str, Any]) -> None:
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise KeyError(f"unknown result columns: {sorted(unknown)}")
        if row.get("status") not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {row.get('status')!r}")
        now = time.time()
        values = {k: (json.dumps(v, default=str) if k in JSON_COLUMNS and v is not None else v)
                  for k, v in row.items()}
        values["updated_at"] = now
        previous = self.get(row["point_key"])
        values["created_at"] = previous["created_at"] if previous else now
        # a row is replaced whole: stale fields from an earlier attempt must not survive
        names = list(values)
        with self._guard():
            self.conn.execute(
                f"INSERT OR REPLACE INTO points ({', '.join(names)}) "
                f"VALUES ({', '.join('?' for _ in names)})",
                [values[n] for n in names],
            )
            self.conn.commit()

    def get(self, point_key: str) -> dict[str, Any] | None:
        with self._guard():
            row = self.conn.execute("SELECT * FROM points WHERE point_key = ?",
                                    (point_key,)).fetchone()
        return self._decode(row) if row else None

    def sweeps(self) -> list[str]:
        """The sweeps that have rows, sorted."""
        with self._guard():
            names = {r["sweep"] for r in self.conn.execute("SELECT DISTINCT sweep FROM points")}
        return sorted(str(n) for n in names if n is not None)

    def rows(self, sweep: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM points WHERE 1=1", []
        if sweep:
            query += " AND sweep = ?"
            args.append(sweep)
        if status:
            query += " AND status = ?"
            args.append(status)
        query += " ORDER BY created_at, rowid"
        with self._guard():
            return [self._decode(r) for r in self.conn.execute(query, args).fetchall()]

    @staticmethod
    def _decode(row: sqlite3.Row) -> dict[str, Any]:
        out = dict(row)
        for k in JSON_COLUMNS:
            if out.get(k) is not None:
                out[k] = json.loads(out[k])
        return out

    def export_csv(self, path: Path, rows: Iterable[dict[str, Any]] | None = None) -> int:
        rows = list(self.rows() if rows is None else rows)
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
            writer.writeheader()
            for row in rows:
                writer.writerow({k: (json.dumps(v) if k in JSON_COLUMNS and v is not None else v)
                                 for k, v in row.items()})
        return len(rows)
