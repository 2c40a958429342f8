"""The cost model a tuning session ranks with (`dlas.tuning.metaschedule.cost_model`)."""

from __future__ import annotations

import numpy as np
from tvm.s_tir.meta_schedule.cost_model import XGBModel

from dlas.tuning.metaschedule.cost_model import ChanceRanking, session_cost_model, xgb_warmup


def test_the_pinned_xgb_model_ranks_by_chance_before_its_warmup() -> None:
    """The premise: below its warm-up MetaSchedule's XGBoost model returns uniform random
    scores whatever the candidates (if an upgrade changes that, the substitution below
    would change what a session searches, and this fails first)."""
    model = XGBModel(num_tuning_cores=1)
    assert model.num_warmup_samples == xgb_warmup() == 100
    # the Python side (MetaSchedule calls it with a context it does not read before then)
    scores = model._inst.predict(None, [None] * 64)
    assert scores.shape == (64,) and scores.min() >= 0.0 and scores.max() <= 1.0
    assert len(set(scores.tolist())) == 64


def test_a_session_that_cannot_reach_the_warmup_ranks_by_chance_and_says_so() -> None:
    model, note = session_cost_model("xgb", xgb_warmup(), seed=0)
    assert isinstance(model, ChanceRanking)
    assert "ranked by chance" in note and str(xgb_warmup()) in note
    assert session_cost_model("xgb", xgb_warmup() + 1, seed=0) == ("xgb", "")
    assert session_cost_model("mlp", 8, seed=0) == ("mlp", "")
    random_model, random_note = session_cost_model("random", 10_000, seed=0)
    assert isinstance(random_model, ChanceRanking) and random_note == ""


def test_chance_ranking_is_seeded_and_leaves_numpys_global_generator_alone() -> None:
    np.random.seed(123)
    expected_global = np.random.random(3)
    np.random.seed(123)
    a = ChanceRanking(7)._inst.predict(None, [None] * 5)
    b = ChanceRanking(7)._inst.predict(None, [None] * 5)
    c = ChanceRanking(8)._inst.predict(None, [None] * 5)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.dtype == np.float64 and ((a >= 0) & (a < 1)).all()
    assert np.array_equal(np.random.random(3), expected_global)
    model = ChanceRanking(0)._inst
    model.update(None, [None], [None])  # measured results teach it nothing
    model.save("/nonexistent/never-written")
