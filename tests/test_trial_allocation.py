"""Trials shared by each task's share of the model's time (`allot_by_time`): the rule by
hand, and the option that picks it."""

from __future__ import annotations

import pytest

from dlas.tuning.metaschedule.plan import MIN_TASK_TRIALS, allot_by_time


def test_trials_follow_the_time_not_the_order() -> None:
    # 60/30/10% of the time: 256 trials are 153.6/76.8/25.6, rounded down, and the two
    # left over go to the largest
    assert allot_by_time([60.0, 30.0, 10.0], [1000, 1000, 1000], 256, 8) == [155, 76, 25]
    # the order of the tasks does not matter, only their times
    assert allot_by_time([10.0, 60.0, 30.0], [1000] * 3, 256, 8) == [25, 155, 76]


def test_a_task_capped_at_its_need_leaves_the_rest_to_the_others() -> None:
    # the largest task lacks only 20 trials: the other two share the remaining 236 by time
    out = allot_by_time([80.0, 15.0, 5.0], [20, 1000, 1000], 256, 8)
    assert out[0] == 20 and sum(out) == 256
    assert out[1] == pytest.approx(236 * 15 / 20, abs=1) and out[2] == pytest.approx(59, abs=1)


def test_a_budget_too_small_for_every_task_goes_to_the_largest() -> None:
    # 16 trials over 10 equal tasks: 1.6 each is no search; two of them get 8 each
    out = allot_by_time([5.0] * 10, [64] * 10, 16, MIN_TASK_TRIALS)
    assert sorted(out) == [0] * 8 + [8, 8]
    # unequal: the second's share of two (16 x 9/19 = 7.6) is still under 8: all to the first
    times = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    assert allot_by_time(times, [64] * 10, 16, MIN_TASK_TRIALS) == [16] + [0] * 9


def test_a_resumed_task_lacking_a_few_trials_gets_them() -> None:
    assert allot_by_time([50.0, 50.0], [3, 1000], 100, 8) == [3, 97]


def test_tasks_without_time_or_need_get_nothing_and_the_budget_holds() -> None:
    out = allot_by_time([0.0, 50.0, 50.0], [64, 0, 64], 100, 8)
    assert out == [0, 0, 64]
    for budget in (1, 7, 8, 9, 100, 1000):
        out = allot_by_time([5.0, 3.0, 2.0], [64, 64, 64], budget, 8)
        assert sum(out) <= budget and all(a <= 64 for a in out)
        assert all(a == 0 or a >= min(8, budget) for a in out)


def test_the_allocation_is_an_option_and_time_is_the_default() -> None:
    from dlas import registry

    option = registry.get("tuning", "metaschedule")
    assert option.parse_params({}).allocation == "time"
    assert option.parse_params({"allocation": "flops"}).allocation == "flops"
    with pytest.raises(ValueError):
        option.parse_params({"allocation": "random"})
