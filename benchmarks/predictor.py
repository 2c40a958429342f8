"""How well `dlas predict` predicts models it never saw (issue 20's benchmark).

Leave one model out across the CIFAR models of `configs/predictor.yaml` (ResNet18,
MobileNetV1, MobileNetV2 and VGG-16, each at two widths, dense, weight-pruned and int8,
two algorithms, untuned): all points of a model family are held out, the predictor is
trained on the other families' per-layer profiles, and each held-out point's end-to-end
latency is predicted. Printed per learner: MAPE and the share of points within +-10%
(nn-Meter's measure), beside

* the FLOPs proxy (latency proportional to MACs, fitted on the training points: what the
  DLAS paper shows to fail), and
* the profile sum: the held-out point's own measured layers plus its own measured rest,
  i.e. what the profile says against the latency timed beside it. It is not a
  prediction; it is the floor any per-layer predictor can reach here, set by how well
  the layer times add up.

The predictions come from features of the model's shapes, as for a sweep never run
(`dlas.predict.sweep`), except the density, which is the profile's (what a pruned
model's layers really kept).

Run (the sweep and its profiles first; ~10 min and ~10 min on 2 cores):

    dlas run configs/predictor.yaml --workspace WS
    dlas profile configs/predictor.yaml --workspace WS
    python benchmarks/predictor.py --workspace WS
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from dlas.predict.features import PointFeatures
from dlas.predict.predictor import LatencyPredictor
from dlas.predict.sweep import training_points

LEARNERS = ("linear", "gbdt", "flops-proxy")


def family(model: str) -> str:
    """ResNet18 at any width is one family: held out together."""
    return re.sub(r"\(.*\)", "", model)


def errors_left_out(points: list[PointFeatures], learner: str) -> dict[str, list[float]]:
    """Relative error (predicted / measured - 1) of each point, its family held out."""
    out: dict[str, list[float]] = defaultdict(list)
    for held in sorted({family(p.model) for p in points}):
        train = [p for p in points if family(p.model) != held]
        test = [p for p in points if family(p.model) == held]
        predictor = LatencyPredictor(learner).fit(train, interval=False)
        for p in test:
            assert p.latency_us is not None
            out[held].append(predictor.predict(p).predicted_us / p.latency_us - 1.0)
    return out


def profile_sum_errors(points: list[PointFeatures]) -> list[float]:
    """The measured layers plus the measured rest against the latency: 0 by definition
    of the rest, so the floor uses the layers alone, against the whole."""
    return [sum(p.layer_us) / p.latency_us - 1.0 for p in points if p.latency_us]


def summary(errors: list[float]) -> tuple[float, float, int]:
    e = np.abs(np.asarray(errors))
    return float(100 * e.mean()), float(100 * (e <= 0.10).mean()), len(e)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", required=True, type=Path,
                        help="workspace where configs/predictor.yaml was run and profiled")
    args = parser.parse_args()
    points = training_points(args.workspace / "results.db")
    families = sorted({family(p.model) for p in points})
    print(f"{len(points)} profiled TVM points, {len(families)} model families: "
          f"{', '.join(families)}")
    print(f"{'learner':14s} {'held out':14s} {'MAPE %':>8s} {'within 10%':>11s} {'n':>4s}")
    for learner in LEARNERS:
        by_family = errors_left_out(points, learner)
        for held, errs in by_family.items():
            mape, within, n = summary(errs)
            print(f"{learner:14s} {held:14s} {mape:8.1f} {within:10.0f}% {n:4d}")
        mape, within, n = summary([e for errs in by_family.values() for e in errs])
        print(f"{learner:14s} {'ALL':14s} {mape:8.1f} {within:10.0f}% {n:4d}")
    mape, within, n = summary(profile_sum_errors(points))
    print(f"{'layers only':14s} {'(measured)':14s} {mape:8.1f} {within:10.0f}% {n:4d}"
          "   <- measured conv+dense layers vs latency: the share the rest term carries")


if __name__ == "__main__":
    main()
