"""The latency predictor (`dlas.predict`): it recovers a known cost, sums layers and a
rest term, gives intervals from held-out models, and warns outside what it saw."""

from __future__ import annotations

import numpy as np
import pytest

from dlas.predict.features import PointContext, PointFeatures, conv_layer, dense_layer
from dlas.predict.learners import LinearCost
from dlas.predict.predictor import LatencyPredictor, held_out_predictions

#: The synthetic machine: us per MMAC and per MB, and a fixed cost per layer.
A_US_PER_MMAC, B_US_PER_MB, C_US = 8.0, 20.0, 3.0
#: The synthetic rest: us per conv.
REST_PER_CONV = 0.7


def _cost(layer) -> float:  # noqa: ANN001
    return A_US_PER_MMAC * layer.effective_macs / 1e6 + B_US_PER_MB * layer.bytes / 1e6 + C_US


def _model(name: str, width: int, depth: int, context: PointContext,
           density: float = 1.0) -> PointFeatures:
    layers = []
    hw = 32
    channels = 3
    for i in range(depth):
        out = width * (1 + i % 3)
        stride = 2 if i in (2, 5) else 1
        hw //= stride
        layers.append(conv_layer(in_channels=channels, out_channels=out, kernel=3,
                                 stride=stride, groups=1, out_h=hw, out_w=hw, density=density,
                                 context=context, index=i))
        channels = out
    layers.append(dense_layer(in_features=channels, out_features=10, density=1.0,
                              context=context))
    us = [_cost(layer) for layer in layers]
    convs = sum(layer.op != "dense" for layer in layers)
    latency = sum(us) + REST_PER_CONV * convs
    return PointFeatures(f"{name}-{context.algorithm}", name, context, layers, 0.0,
                         latency_us=latency, layer_us=us)


def _points() -> list[PointFeatures]:
    dense = PointContext("direct")
    return [_model(f"m{w}x{d}", w, d, dense) for w in (8, 12, 16, 24) for d in (4, 6, 8)]


def test_every_learner_keeps_the_learner_contract() -> None:
    from dlas.predict.learners import LEARNERS, LayerLearner

    points = _points()
    layers = [layer for p in points for layer in p.layers]
    for name, make in LEARNERS.items():
        learner = make()
        assert isinstance(learner, LayerLearner) and learner.name == name
        learner.fit(layers, [t for p in points for t in p.layer_us])
        assert learner.predict(layers[:3]).shape == (3,)


def test_linear_learner_recovers_a_synthetic_linear_cost() -> None:
    points = _points()
    learner = LinearCost()
    layers = [layer for p in points for layer in p.layers]
    learner.fit(layers, [t for p in points for t in p.layer_us])
    a, b, c = learner.coefficients(layers[0])
    assert (a, b, c) == pytest.approx((A_US_PER_MMAC, B_US_PER_MB, C_US), rel=1e-6)


def test_latency_is_the_layer_sum_plus_the_rest() -> None:
    points = _points()
    predictor = LatencyPredictor("linear").fit(points)
    for p in points:
        got = predictor.predict(p)
        assert got.predicted_us == pytest.approx(p.latency_us, rel=1e-6)
        assert got.rest_us == pytest.approx(REST_PER_CONV * p.convs, rel=1e-6)
        assert got.warnings == []


def test_held_out_models_give_the_interval() -> None:
    points = _points()
    # the exact cost is linear: held out, every model is still predicted exactly
    for point, prediction in held_out_predictions(points, "linear"):
        assert prediction.predicted_us == pytest.approx(point.latency_us, rel=1e-6)
    predictor = LatencyPredictor("gbdt").fit(points[::3])  # 4 models: trees err a little
    assert predictor.log_error_quantiles is not None
    low, high = predictor.log_error_quantiles
    assert low < high
    p = predictor.predict(points[0])
    assert p.interval_us is not None and p.interval_us[0] < p.interval_us[1]


def test_layers_unlike_the_training_ones_are_named() -> None:
    predictor = LatencyPredictor("gbdt").fit(_points(), interval=False)
    huge = _model("huge", 512, 4, PointContext("direct"))
    assert any("outside the measured range" in w for w in predictor.predict(huge).warnings)
    other = _model("other", 8, 4, PointContext("spatial_pack_csr"), density=0.2)
    assert any("no conv2d layer was measured with spatial_pack_csr" in w
               for w in predictor.predict(other).warnings)


def test_sparse_layers_compute_their_non_zeros_and_dense_layers_all() -> None:
    csr = PointContext("direct_csr")
    conv = conv_layer(in_channels=8, out_channels=8, kernel=3, stride=1, groups=1,
                      out_h=8, out_w=8, density=0.25, context=csr)
    fc = dense_layer(in_features=8, out_features=10, density=1.0, context=csr)
    assert conv.effective_macs == pytest.approx(0.25 * conv.macs) and conv.sparse
    assert fc.effective_macs == fc.macs and not fc.sparse
    assert np.isfinite(conv.vector()).all()


def test_no_profiles_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="dlas profile"):
        LatencyPredictor().fit([])
