"""The cost model a tuning session ranks its candidates with.

Why: MetaSchedule's XGBoost model predicts nothing until it holds `num_warmup_samples`
(100) measured candidates. Before that, `XGBModel.predict` returns uniform random scores,
while `update` still extracts the features of every measured candidate, imports xgboost
(and scikit-learn through it) and trains a booster after each batch. A session of at most
that many trials, like the quickstart's 64, never reaches it: it paid for the training
(1.4 s of import and 2.0 s of features and training in a 30 s tuned point on a Zen 4) and
ranked by chance all the same. Such a session now ranks by chance from its start, as the
XGBoost model would have, without the training, and with a generator seeded by the
session (XGBoost's draws came from numpy's global generator, unseeded). The tuning line
says so. The same ranking serves `cost_model: random`, in place of MetaSchedule's
`RandomModel`, which seeds numpy's global generator and replaces its state on every call.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.cost_model import PyCostModel, XGBModel


def xgb_warmup() -> int:
    """Measured candidates MetaSchedule's XGBoost model needs before it predicts."""
    return int(inspect.signature(XGBModel.__init__).parameters["num_warmup_samples"].default)


@derived_object
class ChanceRanking(PyCostModel):
    """Scores drawn uniformly from a generator of the session's own (see module doc)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.rng = np.random.default_rng(seed)

    def load(self, path: str) -> None:
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context: Any, candidates: list[Any], results: list[Any]) -> None:
        pass

    def predict(self, context: Any, candidates: list[Any]) -> np.ndarray:
        return self.rng.uniform(0.0, 1.0, size=len(candidates)).astype("float64")


def session_cost_model(kind: str, budget: int, seed: int) -> tuple[Any, str]:
    """The cost model for a session of `budget` trials: (what `tune_tasks` takes, a note
    for the tuning line, empty when the model is the one asked for as it comes)."""
    if kind == "random":
        return ChanceRanking(seed), ""
    if kind == "xgb" and budget <= xgb_warmup():
        return ChanceRanking(seed), (f"ranked by chance: the xgb cost model predicts only "
                                     f"after {xgb_warmup()} measured candidates")
    return kind, ""
