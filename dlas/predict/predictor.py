"""The latency predictor: per-layer learners, a rest term, a prediction interval, and a
warning for every layer unlike anything it was trained on.

End-to-end latency = sum of the predicted conv and dense layers + the point's rest
(`PointFeatures.rest_vector`: a cost per conv; fitted by non-negative least squares per
rest group, `PointFeatures.rest_group`).

The interval: with points of three or more models, the predictor is refitted leaving
each model out, and the held-out points' log errors (measured / predicted) give the 5th
and 95th percentiles; a prediction's interval is the prediction times those. So it says
how wrong the predictor was on models it had not seen, not how well it fits its own
training data. With fewer models there is no interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from dlas.predict.features import NUMERIC_NAMES, LayerFeatures, PointFeatures
from dlas.predict.learners import LEARNERS

#: A layer's numeric feature this far outside the trained range (as a share of the
#: range) is outside what was measured.
RANGE_SLACK = 0.1


@dataclass
class Prediction:
    label: str
    predicted_us: float
    layer_us: list[float]
    rest_us: float
    #: 90% interval from held-out models' errors; None without one.
    interval_us: tuple[float, float] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def predicted_ms(self) -> float:
        return self.predicted_us / 1e3


@dataclass
class _Range:
    low: np.ndarray
    high: np.ndarray
    categories: set[tuple[str, str, bool, str]]


class LatencyPredictor:
    """Fit on measured points (`fit`), then predict any point's latency (`predict`)."""

    def __init__(self, learner: str = "gbdt") -> None:
        if learner not in LEARNERS:
            raise ValueError(f"unknown learner '{learner}'; known: {', '.join(LEARNERS)}")
        self.learner_name = learner
        self.learner = LEARNERS[learner]()
        self.rest: dict[tuple[bool, str] | tuple[()], np.ndarray] = {}
        self.ranges: dict[str, _Range] = {}
        self.log_error_quantiles: tuple[float, float] | None = None
        self.models: list[str] = []

    # -- fitting ----------------------------------------------------------------------

    def fit(self, points: Sequence[PointFeatures], *, interval: bool = True) -> LatencyPredictor:
        points = [p for p in points if p.latency_us is not None and p.layer_us]
        if not points:
            raise ValueError("no profiled points to train on: run `dlas profile` on a "
                             "measured sweep first")
        layers = [layer for p in points for layer in p.layers]
        us = [t for p in points for t in p.layer_us]
        self.learner.fit(layers, us)
        self._fit_rest(points)
        self._fit_ranges(layers)
        self.models = sorted({p.model for p in points})
        if interval and len(self.models) >= 3:
            errors = [np.log(p.latency_us / pred.predicted_us)
                      for p, pred in held_out_predictions(points, self.learner_name)
                      if pred.predicted_us > 0]
            q05, q95 = np.quantile(errors, [0.05, 0.95])
            self.log_error_quantiles = (float(q05), float(q95))
        return self

    def _fit_rest(self, points: Sequence[PointFeatures]) -> None:
        groups: dict[tuple[bool, str] | tuple[()], tuple[list[list[float]], list[float]]] = {}
        for p in points:
            rest = p.measured_rest_us
            if rest is None:
                continue
            for key in (p.rest_group, ()):
                rows, ys = groups.setdefault(key, ([], []))
                rows.append(p.rest_vector())
                ys.append(max(rest, 0.0))
        self.rest = {key: nnls(np.asarray(rows), np.asarray(ys))[0]
                     for key, (rows, ys) in groups.items() if len(ys) >= 3 or key == ()}

    def _fit_ranges(self, layers: Sequence[LayerFeatures]) -> None:
        for op in sorted({layer.op for layer in layers}):
            mine = [layer for layer in layers if layer.op == op]
            values = np.asarray([layer.numeric() for layer in mine])
            self.ranges[op] = _Range(values.min(axis=0), values.max(axis=0),
                                     {(la.op, la.context.family, la.sparse, la.context.dtype)
                                      for la in mine})

    # -- predicting -------------------------------------------------------------------

    def _rest_us(self, point: PointFeatures) -> float:
        coef = self.rest.get(point.rest_group, self.rest.get(()))
        return 0.0 if coef is None else float(np.dot(coef, point.rest_vector()))

    def outside(self, layer: LayerFeatures) -> str | None:
        """Why a layer lies outside what the predictor was trained on, or None."""
        known = self.ranges.get(layer.op)
        if known is None:
            return f"no {layer.op} layer was measured"
        kind = (layer.op, layer.context.family, layer.sparse, layer.context.dtype)
        if kind not in known.categories:
            return (f"no {layer.op} layer was measured with {layer.context.algorithm} in "
                    f"{layer.context.dtype}")
        values = np.asarray(layer.numeric())
        slack = RANGE_SLACK * np.maximum(known.high - known.low, 1e-9)
        out = [NUMERIC_NAMES[i] for i in np.flatnonzero(
            (values < known.low - slack) | (values > known.high + slack))]
        return f"{', '.join(out)} outside the measured range" if out else None

    def predict(self, point: PointFeatures) -> Prediction:
        layer_us = [max(float(t), 0.0) for t in self.learner.predict(point.layers)]
        rest = max(self._rest_us(point), 0.0)
        total = sum(layer_us) + rest
        interval = None
        if self.log_error_quantiles is not None:
            low, high = self.log_error_quantiles
            interval = (total * float(np.exp(low)), total * float(np.exp(high)))
        warnings = []
        for layer in point.layers:
            why = self.outside(layer)
            if why:
                where = f"conv {layer.index}" if layer.index is not None else layer.op
                warnings.append(f"{where}: {why}")
        return Prediction(point.label, total, layer_us, rest, interval, warnings)


def held_out_predictions(points: Sequence[PointFeatures], learner: str
                         ) -> list[tuple[PointFeatures, Prediction]]:
    """Each point predicted by a predictor fitted without its model's points."""
    out = []
    for model in sorted({p.model for p in points}):
        train = [p for p in points if p.model != model]
        if not train:
            continue
        fitted = LatencyPredictor(learner).fit(train, interval=False)
        out += [(p, fitted.predict(p)) for p in points if p.model == model]
    return out
