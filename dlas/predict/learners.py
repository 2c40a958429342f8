"""The per-layer learners the predictor can use, behind one small interface.

* `LinearCost` (Li et al.'s linear family, in its physical form): per group of layers
  computed alike (op, algorithm family, CSR or not, dtype, 1x1 or not), time = a x effective MACs +
  b x bytes + c, fitted by non-negative least squares (a cost can only add time). A group
  with too few layers falls back to its op's pooled fit. Interpretable, and it
  extrapolates along MACs and bytes, which a tree cannot.
* `BoostedTrees` (Li et al.'s GBDT): scikit-learn's histogram gradient boosting on every
  feature (`LayerFeatures.vector`), fitted on log time per effective MAC, so that errors
  are relative (a 10 us layer matters as much as a 1 ms one when the error is a share)
  and a layer larger than any trained one is still predicted from its efficiency.
* `FlopsProxy`: time proportional to MACs, one constant: the proxy the DLAS paper shows
  to fail; kept as the benchmark's floor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
from scipy.optimize import nnls

from dlas.predict.features import LayerFeatures

#: Layers a group needs before it gets its own linear fit.
MIN_GROUP = 4


@runtime_checkable
class LayerLearner(Protocol):
    """What the predictor needs of a learner (`LEARNERS`): fitted on layers and their
    measured microseconds, it predicts microseconds for other layers."""

    name: str

    def fit(self, layers: Sequence[LayerFeatures], us: Sequence[float]) -> None: ...

    def predict(self, layers: Sequence[LayerFeatures]) -> np.ndarray: ...


def _linear_row(layer: LayerFeatures) -> list[float]:
    return [layer.effective_macs / 1e6, layer.bytes / 1e6, 1.0]


def _group(layer: LayerFeatures) -> tuple[str, str, bool, str, bool]:
    """Layers computed alike: a 1x1 conv is a matrix product, its cost per MAC is not a
    3x3 conv's (measured: MobileNets' pointwise convs vs ResNet's and VGG's 3x3)."""
    return (layer.op, layer.context.family, layer.sparse, layer.context.dtype,
            layer.kernel == 1)


class LinearCost:
    """time = a x MMACs + b x MB + c per group, a, b, c >= 0 (see the module doc)."""

    name = "linear"

    def __init__(self) -> None:
        self.coef: dict[tuple[str, ...], np.ndarray] = {}

    @staticmethod
    def _solve(rows: list[list[float]], us: list[float]) -> np.ndarray:
        coef, _ = nnls(np.asarray(rows), np.asarray(us))
        return coef

    def fit(self, layers: Sequence[LayerFeatures], us: Sequence[float]) -> None:
        by_group: dict[tuple[str, ...], tuple[list[list[float]], list[float]]] = {}
        for layer, t in zip(layers, us, strict=True):
            for key in (_group(layer), (layer.op,), ()):
                rows, ys = by_group.setdefault(key, ([], []))
                rows.append(_linear_row(layer))
                ys.append(float(t))
        self.coef = {key: self._solve(rows, ys) for key, (rows, ys) in by_group.items()
                     if len(ys) >= MIN_GROUP or key == ()}

    def coefficients(self, layer: LayerFeatures) -> np.ndarray:
        for key in (_group(layer), (layer.op,), ()):
            if key in self.coef:
                return self.coef[key]
        raise RuntimeError("the linear learner is not fitted")

    def predict(self, layers: Sequence[LayerFeatures]) -> np.ndarray:
        return np.asarray([float(np.dot(self.coefficients(layer), _linear_row(layer)))
                           for layer in layers])


class BoostedTrees:
    """Gradient-boosted trees on log time per effective MAC (see the module doc).

    Why per MAC: trees predict constants per leaf and cannot extrapolate; a model held
    out (VGG-16, wider than the rest) has layers larger than any trained one. Its time per
    MAC, the layer's efficiency, stays within what was seen; its MACs are known."""

    name = "gbdt"

    def __init__(self, seed: int = 0) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.model = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.05,
                                                   min_samples_leaf=5, random_state=seed)

    def fit(self, layers: Sequence[LayerFeatures], us: Sequence[float]) -> None:
        x = np.asarray([layer.vector() for layer in layers])
        per_mac = np.maximum(np.asarray(us, dtype=float), 1e-3) / _work(layers)
        self.model.fit(x, np.log(per_mac))

    def predict(self, layers: Sequence[LayerFeatures]) -> np.ndarray:
        if not layers:
            return np.zeros(0)
        per_mac = np.exp(self.model.predict(np.asarray([layer.vector() for layer in layers])))
        return per_mac * _work(layers)


def _work(layers: Sequence[LayerFeatures]) -> np.ndarray:
    return np.asarray([max(layer.effective_macs, 1.0) for layer in layers])


class FlopsProxy:
    """time = k x MACs, one k for everything (the paper's failing proxy)."""

    name = "flops-proxy"

    def __init__(self) -> None:
        self.k = 0.0

    def fit(self, layers: Sequence[LayerFeatures], us: Sequence[float]) -> None:
        macs = np.asarray([layer.macs for layer in layers])
        self.k = float(np.dot(macs, us) / max(float(np.dot(macs, macs)), 1e-30))

    def predict(self, layers: Sequence[LayerFeatures]) -> np.ndarray:
        return self.k * np.asarray([layer.macs for layer in layers])


#: The learners `dlas predict --learner` takes, by name.
LEARNERS: dict[str, Callable[[], LayerLearner]] = {
    "linear": LinearCost, "gbdt": BoostedTrees, "flops-proxy": FlopsProxy}
