"""`dlas predict CONFIG`: every TVM point of a sweep predicted from a workspace's
profiles, beside its measured latency where the sweep has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from dlas.predict.predictor import LatencyPredictor, Prediction
from dlas.predict.sweep import sweep_points, training_points


@dataclass
class PredictedPoint:
    point: Any
    prediction: Prediction | None
    measured_ms: float | None = None
    why_not: str | None = None


@dataclass
class SweepPrediction:
    learner: str
    trained_points: int
    trained_models: list[str]
    interval: bool
    points: list[PredictedPoint] = field(default_factory=list)


def predict_sweep(config: Any, train_db: Path, db_path: Path | None,
                  learner: str = "gbdt") -> SweepPrediction:
    """Fit on `train_db`'s profiles; predict every point of `config`, with the measured
    latency from `db_path` where the point has an ok row there."""
    from dlas.results.store import ResultStore

    training = training_points(train_db)
    predictor = LatencyPredictor(learner).fit(training)
    out = SweepPrediction(learner, len(training), predictor.models,
                          predictor.log_error_quantiles is not None)
    rows: dict[str, Any] = {}
    if db_path is not None and db_path.exists():
        with ResultStore(db_path) as store:
            rows = {r.point_key: r for r in store.rows(status="ok")}
    for point, features, why in sweep_points(config):
        row = rows.get(point.key)
        measured = row.latency_median_ms if row is not None else None
        if features is None:
            out.points.append(PredictedPoint(point, None, measured, why))
            continue
        out.points.append(PredictedPoint(point, predictor.predict(features), measured))
    return out


def _label(point: Any) -> str:
    return " / ".join((point.models.label, point.compression.label, point.algorithms.label,
                       point.tuning.label))


def table(result: SweepPrediction) -> Table:
    models = ", ".join(result.trained_models)
    title = (f"predicted latency ({result.learner}, trained on {result.trained_points} "
             f"profiled points of {len(result.trained_models)} models: {models})")
    t = Table(title=title, title_justify="left")
    for name in ("point", "predicted ms", "90% interval", "measured ms", "error", "notes"):
        t.add_column(name, justify="left" if name in ("point", "notes") else "right")
    for item in result.points:
        p = item.prediction
        if p is None:
            t.add_row(_label(item.point), "", "", _ms(item.measured_ms), "", item.why_not or "")
            continue
        interval = (f"{p.interval_us[0] / 1e3:.3f}-{p.interval_us[1] / 1e3:.3f}"
                    if p.interval_us else "")
        error = (f"{100 * (p.predicted_ms / item.measured_ms - 1):+.0f}%"
                 if item.measured_ms else "")
        notes = (f"{len(p.warnings)} layer(s) outside the measured range" if p.warnings
                 else "")
        t.add_row(_label(item.point), f"{p.predicted_ms:.3f}", interval,
                  _ms(item.measured_ms), error, notes)
    return t


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def as_json(result: SweepPrediction) -> dict[str, Any]:
    points = []
    for item in result.points:
        p = item.prediction
        points.append({
            "point_key": item.point.key, "label": _label(item.point),
            "predicted_ms": None if p is None else p.predicted_ms,
            "interval_ms": None if p is None or p.interval_us is None
            else [v / 1e3 for v in p.interval_us],
            "layers_ms": None if p is None else sum(p.layer_us) / 1e3,
            "rest_ms": None if p is None else p.rest_us / 1e3,
            "measured_ms": item.measured_ms, "warnings": [] if p is None else p.warnings,
            "not_predicted": item.why_not})
    return {"learner": result.learner, "trained_points": result.trained_points,
            "trained_models": result.trained_models, "points": points}
