"""Finer states inside one placement (`dlas.measure.round_trip`): chunks whose round trip
between the measurement's CPUs read above their placement's usual are left out where they
ran slower, kept where they did not; judged per placement; and a whole scripted run that
moves between a 52 ns and a 62 ns near state (the Zen 4's) ends with its figure from the
52 ns chunks, taking more rounds for them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dlas.measure.contention import CONFIRM_MIN_CHUNKS, confirm, sign_test_p
from dlas.measure.placement import FAR, NEAR, SLOW_ROUND_TRIP, UNUSABLE, PlacementProbe
from dlas.measure.round_trip import ROUND_TRIP_FACTOR, RoundTripJudge
from dlas.measure.stopping import RoundsPolicy
from tests.test_rounds import FakeClock, sampler, states


@dataclass
class Chunk:
    state: str
    round_trip_ns: list[float | None]
    samples_s: list[float] = field(default_factory=list)


def _run(slow_ratio: float, subjects: str = "abc", state: str = NEAR, fast_ns: float = 52.0,
         slow_ns: float = 62.0) -> list[tuple[str, Chunk]]:
    """Each subject: 6 chunks at `fast_ns` taking 1 ms, 3 at `slow_ns` taking
    `slow_ratio` ms."""
    chunks = []
    for s in subjects:
        chunks += [(s, Chunk(state, [fast_ns, fast_ns + 1], [1e-3] * 5)) for _ in range(6)]
        chunks += [(s, Chunk(state, [slow_ns, slow_ns], [slow_ratio * 1e-3] * 5))
                   for _ in range(3)]
    return chunks


def test_the_factor_flags_zen4s_62_ns_state_against_every_usual_its_runs_read() -> None:
    assert all(ROUND_TRIP_FACTOR * usual < 62.0 for usual in (51.0, 53.0, 55.0))
    assert ROUND_TRIP_FACTOR * 51.0 > 56.0  # the 56-60 ns group, as fast as 50-55, mostly kept


def test_slow_round_trips_are_left_out_only_where_their_chunks_ran_slower() -> None:
    flags, verdict = RoundTripJudge().flags(_run(1.25))
    assert sum(flags) == 9 and verdict.flagged == 9 and verdict.ignored is None
    assert verdict.slowdown == pytest.approx(1.25)
    assert verdict.usual_ns == {NEAR: pytest.approx(52.0, abs=1.0)}

    flags, verdict = RoundTripJudge().flags(_run(1.0))
    assert not any(flags) and verdict.flagged == 0
    assert verdict.ignored and "not slowed" in verdict.ignored
    assert verdict.slowdown == pytest.approx(1.0)

    # 3 flagged: too few to show anything, so they do not count (and cost no rounds)
    flags, verdict = RoundTripJudge().flags(_run(1.25, "a"))
    assert CONFIRM_MIN_CHUNKS > 3
    assert not any(flags) and verdict.ignored and "could not yet be shown" in verdict.ignored


def test_flags_without_peers_to_show_them_cost_no_rounds() -> None:
    """The Zen 3's pattern: most chunks' round trips read above the usual, so no variant
    has two unflagged chunks to compare its flagged ones with. Presumed, those flags
    stood for rounds; shown-first, each is compared with the one unflagged chunk of its
    variant, and they fall (and with no unflagged chunk at all, they do not count)."""
    chunks = []
    for s in "abcdefgh":
        chunks.append((s, Chunk(NEAR, [66.0, 66.0], [1e-3] * 5)))
        chunks += [(s, Chunk(NEAR, [110.0 + i, 112.0], [1e-3] * 5)) for i in range(5)]
    flags, verdict = RoundTripJudge().flags(chunks)
    assert not any(flags) and verdict.flagged == 0
    assert verdict.ignored and "not slowed" in verdict.ignored
    alone = [(s, c) for s, c in chunks if max(v for v in c.round_trip_ns if v) > 100]
    alone += [("z", Chunk(NEAR, [66.0, 66.0], [1e-3] * 5)) for _ in range(6)]
    flags, verdict = RoundTripJudge().flags(alone)
    assert not any(flags) and verdict.ignored and "0 compared" in verdict.ignored


def test_flagged_chunks_slower_no_more_often_than_chance_are_not_shown() -> None:
    """A median above `CONFIRM_SLOWDOWN` with 5 of 8 flagged chunks slower than their
    peers: the sign test says chance (p = 0.36), and the flags are lifted; the same flags
    with every chunk slower stand."""
    def run(times: list[float]) -> list[tuple[str, Chunk]]:
        chunks = []
        for s, t in zip("abcdefgh", times, strict=True):
            chunks += [(s, Chunk(NEAR, [52.0, 52.0], [1e-3] * 5)) for _ in range(3)]
            chunks.append((s, Chunk(NEAR, [62.0, 62.0], [t * 1e-3] * 5)))
        return chunks

    mixed = [1.10, 1.12, 1.08, 1.06, 1.05, 0.95, 0.97, 0.96]  # median 1.055, 5 of 8 slower
    flags, verdict = RoundTripJudge().flags(run(mixed))
    assert verdict.slowdown is not None and verdict.slowdown >= 1.0
    assert not any(flags) and verdict.ignored and "chance" in verdict.ignored
    flags, verdict = RoundTripJudge().flags(run([1.06] * 8))
    assert sum(flags) == 8 and verdict.ignored is None


def test_cache_flags_still_stand_until_shown_wrong() -> None:
    """`confirm` without `until_shown` (the cache readings' judge) keeps a handful of
    flags it cannot compare: they cost little, and a real spell must not be presumed
    away."""
    few = _run(1.25, "a")
    flags = [max(v for v in c.round_trip_ns if v) > 60 for _, c in few]
    kept, ignored, _ = confirm(few, flags, flagged_by="x", every="all")
    assert kept == flags and ignored is None
    assert sign_test_p([1.1] * 6) == pytest.approx(1 / 64)
    assert sign_test_p([1.1, 0.9]) == pytest.approx(0.75)
    assert sign_test_p([1.1] * 1100 + [0.9] * 1100) == pytest.approx(0.5, abs=0.02)


def test_round_trips_within_the_factor_are_not_flagged() -> None:
    flags, verdict = RoundTripJudge().flags(_run(1.3, slow_ns=52.0 * ROUND_TRIP_FACTOR - 0.5))
    assert not any(flags) and verdict.flagged == 0 and verdict.ignored is None


def test_each_placement_is_judged_against_its_own_usual_round_trip() -> None:
    """Far chunks at 350 ns beside near ones at 52: far is not 'slower than near's usual';
    a far chunk at 420 ns is slower than far's."""
    near = _run(1.25)
    far = _run(1.25, state=FAR, fast_ns=350.0, slow_ns=420.0)
    flags, verdict = RoundTripJudge().flags(near + far)
    assert sum(flags) == 18
    assert all(flag == (max(c.round_trip_ns) in (62.0, 420.0))  # type: ignore[type-var]
               for flag, (_, c) in zip(flags, near + far, strict=True))
    assert verdict.usual_ns is not None and set(verdict.usual_ns) == {NEAR, FAR}


def test_too_few_readings_judge_nothing() -> None:
    chunks = [("a", Chunk(NEAR, [52.0, 52.0], [1e-3])), ("a", Chunk(NEAR, [80.0, 80.0], [2e-3]))]
    flags, verdict = RoundTripJudge().flags(chunks)
    assert not any(flags) and verdict.usual_ns == {}


def test_a_run_between_two_near_states_takes_its_figure_from_the_fast_one() -> None:
    """The Zen 4's near round trip alternates between 52 ns and 62 ns every 7 ms of fake
    time, and the variants run 1.3x slower at 62: the 62 ns chunks are labelled, kept
    with their readings, not used, and the run goes on until every variant has its
    min_rounds chunks at 52, recording the flags and the usual round trip."""
    clock = FakeClock()
    slow = lambda t: int(t * 1000) // 7 % 2 == 1  # noqa: E731 - the 62 ns spells
    probe = PlacementProbe([0, 1], bursts=1,
                           reader=lambda a, b: 62.0 if slow(clock.now) else 52.0)
    policy = RoundsPolicy(samples=4, min_rounds=4, max_rounds=60, placement_budget_s=100.0,
                          settle_s=0.0)
    s, _, _ = sampler(["a", "b", "c"], policy, clock=clock, placement=probe, busy=slow)
    out = s.run()
    assert out.placement == NEAR
    assert SLOW_ROUND_TRIP in UNUSABLE
    for run in out.runs.values():
        used = run.usable_rounds(NEAR)
        assert len(used) >= 4
        assert all(max(v for v in r.round_trip_ns if v) < 60.0 for r in used)
        flagged = [r for r in run.rounds if r.placement == SLOW_ROUND_TRIP]
        assert flagged and all(max(v for v in r.round_trip_ns if v) == 62.0 for r in flagged)
        assert set(states(run)) <= {NEAR, SLOW_ROUND_TRIP, "mixed"}
    events = [e for e in next(iter(out.runs.values())).events
              if e["event"] == "slow_round_trip"]
    assert events and events[0]["slowdown"] == pytest.approx(1.3, abs=0.05)
    assert events[0]["usual_ns"] == {NEAR: 52.0}


def test_a_run_whose_round_trips_move_for_nothing_leaves_no_chunk_out() -> None:
    """Round trips that alternate 52 / 62 ns while the variants run at full speed (a host
    whose near readings spread wide and mean nothing): every flag is lifted, and the run
    says why."""
    clock = FakeClock()
    slow = lambda t: int(t * 1000) // 7 % 2 == 1  # noqa: E731
    probe = PlacementProbe([0, 1], bursts=1,
                           reader=lambda a, b: 62.0 if slow(clock.now) else 52.0)
    policy = RoundsPolicy(samples=4, min_rounds=4, max_rounds=60, placement_budget_s=100.0,
                          settle_s=0.0)
    s, _, _ = sampler(["a", "b", "c"], policy, clock=clock, placement=probe)
    out = s.run()
    events = next(iter(out.runs.values())).events
    assert any(e["event"] == "round_trip_ignored" for e in events)
    assert not any(e["event"] == "slow_round_trip" for e in events)
    for run in out.runs.values():
        assert SLOW_ROUND_TRIP not in states(run)
