"""When a tuning session's search breeds (`dlas.tuning.metaschedule.search_strategy`)."""

from __future__ import annotations

import inspect

from tvm.s_tir import meta_schedule as ms

from dlas.tuning.metaschedule.cost_model import ChanceRanking, session_cost_model
from dlas.tuning.metaschedule.search_strategy import breeds, evolutionary_search


def test_only_a_chance_ranked_session_of_one_batch_per_task_skips_the_generations() -> None:
    chance, _ = session_cost_model("xgb", 64, seed=0)  # the quickstart's 64 trials
    assert isinstance(chance, ChanceRanking)
    assert not breeds(chance, [32, 17, 15], per_iter=32)  # the quickstart's tuned point
    assert breeds(chance, [32, 33], per_iter=32)  # a task with a second batch breeds
    predicting, _ = session_cost_model("xgb", 400, seed=0)
    assert breeds(predicting, [32, 17], per_iter=32)  # ranked by a model that predicts


def test_the_strategy_without_breeding_keeps_everything_but_the_generations() -> None:
    default = inspect.signature(ms.search_strategy.EvolutionarySearch.__init__).parameters
    bred, drawn = evolutionary_search(16), evolutionary_search(16, breed=False)
    assert bred.genetic_num_iters == default["genetic_num_iters"].default > 0
    assert drawn.genetic_num_iters == 0
    for field in ("population_size", "init_min_unmeasured", "max_fail_count",
                  "init_measured_ratio", "eps_greedy"):
        assert getattr(bred, field) == getattr(drawn, field), field
