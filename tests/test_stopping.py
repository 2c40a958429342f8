"""The stopping rule (`dlas.measure.stopping.next_step`) by value: every branch of it from
counts and a time alone, without a sampler, a clock or a probe."""

from __future__ import annotations

from collections import Counter

from dlas.measure.placement import FAR, NEAR
from dlas.measure.stopping import RoundCounts, RoundsPolicy, Waiting, next_step

POLICY = RoundsPolicy(samples=20, min_rounds=4, placement_budget_s=10.0)


def counts(usable: dict[str, int], samples: int = 100, placed: dict[str, int] | None = None,
           rounds: int | None = None, loaded: bool = False) -> RoundCounts:
    """Two variants with the same tallies (usable chunks per placement, samples each)."""
    placed = placed if placed is not None else usable
    return RoundCounts(
        usable={label: Counter(usable) for label in "ab"},
        samples={label: Counter({state: samples for state in usable}) for label in "ab"},
        placed={label: Counter(placed) for label in "ab"},
        rounds=rounds if rounds is not None else sum(usable.values()),
        any_loaded=loaded)


def test_enough_in_the_target_placement_stops_only_with_enough_samples() -> None:
    assert next_step(POLICY, NEAR, counts({NEAR: 4}), Waiting(), 0.0, False).stop
    step = next_step(POLICY, NEAR, counts({NEAR: 4}, samples=12), Waiting(), 0.0, False)
    assert not step.stop and step.waiting == Waiting()  # on for the samples, no wait begun


def test_too_few_rounds_anywhere_goes_on_without_waiting() -> None:
    step = next_step(POLICY, NEAR, counts({NEAR: 2, FAR: 1}), Waiting(), 5.0, False)
    assert step == next_step(POLICY, NEAR, counts({NEAR: 2, FAR: 1}), Waiting(), 5.0, False)
    assert not step.stop and step.waiting == Waiting() and step.began_waiting_in is None


def test_enough_far_waits_the_placement_budget_for_near() -> None:
    c = counts({FAR: 4, NEAR: 1}, rounds=5)
    first = next_step(POLICY, NEAR, c, Waiting(), 3.0, False)
    assert not first.stop and first.began_waiting_in == FAR
    assert first.waiting == Waiting(rounds_since=3.0, enough_since=3.0)
    later = next_step(POLICY, NEAR, c, first.waiting, 12.9, False)
    assert not later.stop and later.began_waiting_in is None  # said once
    assert next_step(POLICY, NEAR, c, later.waiting, 13.0, False).stop


def test_a_zero_placement_budget_stops_as_soon_as_a_placement_is_enough() -> None:
    policy = RoundsPolicy(samples=20, min_rounds=4, placement_budget_s=0.0)
    assert next_step(policy, NEAR, counts({FAR: 4}), Waiting(), 0.0, False).stop


def test_without_the_target_wait_a_split_run_goes_on_and_an_enough_one_stops() -> None:
    """`target_wait` off (a sweep whose earlier wait came to nothing): rounds split
    between placements still go on within the budget (rule 3) until one placement has
    enough; then the run stops at once instead of waiting for near (rule 4)."""
    policy = RoundsPolicy(samples=20, min_rounds=4, placement_budget_s=10.0,
                          target_wait=False)
    split = counts({NEAR: 2, FAR: 3}, rounds=5)
    first = next_step(policy, NEAR, split, Waiting(), 3.0, False)
    assert not first.stop and first.waiting.rounds_since == 3.0
    assert not next_step(policy, NEAR, split, first.waiting, 12.9, False).stop
    step = next_step(policy, NEAR, counts({NEAR: 2, FAR: 4}, rounds=6), first.waiting, 4.0,
                     False)
    assert step.stop and step.began_waiting_in == FAR
    assert next_step(policy, NEAR, counts({NEAR: 4, FAR: 2}), Waiting(), 0.0, False).stop


def test_chunks_that_never_settle_stop_a_budget_after_min_rounds() -> None:
    mixed = counts({NEAR: 1, FAR: 1}, rounds=4)  # the rest mixed: nothing usable enough
    first = next_step(POLICY, NEAR, mixed, Waiting(), 2.0, False)
    assert not first.stop and first.waiting.rounds_since == 2.0
    assert not next_step(POLICY, NEAR, mixed, first.waiting, 11.0, False).stop
    assert next_step(POLICY, NEAR, mixed, first.waiting, 12.0, False).stop


def test_a_busy_machine_with_its_noise_budget_spent_stops_with_what_it_has() -> None:
    busy = counts({}, placed={NEAR: 4}, rounds=4, loaded=True)
    assert next_step(POLICY, NEAR, busy, Waiting(), 0.0, True).stop
    # budget left: the loaded rounds do not count, go on
    assert not next_step(POLICY, NEAR, busy, Waiting(), 0.0, False).stop


def test_with_the_noise_budget_spent_placed_chunks_count_as_enough() -> None:
    # loaded rounds were re-taken and are quiet now, but some chunks earlier were placed
    c = counts({FAR: 2}, placed={FAR: 4}, rounds=3)
    assert next_step(POLICY, NEAR, c, Waiting(), 1.0, False).began_waiting_in is None
    assert next_step(POLICY, NEAR, c, Waiting(), 1.0, True).began_waiting_in == FAR
