"""The interleaved round sampler (`dlas.measure.rounds`) on scripted placements, loads and a
fake clock: when it stops, what it does with mixed, far and loaded rounds, the random but
reproducible order of subjects, warm-up, and what each subject's `TimingRun` records. One
test times real calls while real busy-loop processes load the machine."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from dlas.measure.contention import (
    CONFIRM_MIN_CHUNKS,
    CONTENTION_FACTOR,
    ContentionJudge,
    contention_limit,
)
from dlas.measure.load import CpuLoadProbe, LoadReading
from dlas.measure.placement import (
    CONTENDED,
    ERRATIC,
    FAR,
    MIXED,
    NEAR,
    SINGLE,
    UNKNOWN,
    PlacementProbe,
    PlacementReading,
)
from dlas.measure.record import TimingRun
from dlas.measure.rounds import RoundSampler, RoundsResult, round_placement
from dlas.measure.stopping import RoundsPolicy, choose_placement
from tests.test_load import busy_loops, children_reader, stop

#: Round trips the scripted placement reader returns for each state, ns.
NS = {NEAR: 80.0, FAR: 350.0, ERRATIC: 5000.0}


class FakeClock:
    """A clock that moves only when slept on or when a subject is timed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeSubject:
    """A variant whose every sample takes `per_sample_s` of fake time; logs its calls."""

    def __init__(self, label: str, clock: FakeClock, log: list[tuple[str, int, int]],
                 per_sample_s: float = 1e-3, cpus: Sequence[int] = (0, 1)) -> None:
        self.label, self.cpus = label, list(cpus)
        self.clock, self.log, self.per_sample_s = clock, log, per_sample_s

    #: While this says so, every sample takes `slowdown` times as long (a guest sharing
    #: the core; set by `sampler(..., busy=)`).
    busy: Callable[[float], bool] = staticmethod(lambda _t: False)
    slowdown = 1.3

    def time(self, n: int, warmup: int) -> list[float]:
        self.log.append((self.label, n, warmup))
        per = self.per_sample_s * (self.slowdown if self.busy(self.clock.now) else 1.0)
        self.clock.now += (n + warmup) * per
        return [per] * n


def probe_by_time(clock: FakeClock, state_at: Callable[[float], str]) -> PlacementProbe:
    """A real `PlacementProbe` over two CPUs whose reader says what `state_at(now)` is."""
    return PlacementProbe([0, 1], bursts=1, reader=lambda a, b: NS[state_at(clock.now)])


def probe_by_read(states: Sequence[str], then: str = NEAR) -> PlacementProbe:
    """A `PlacementProbe` whose successive readings are `states`, then `then` forever."""
    left = list(states)
    return PlacementProbe([0, 1], bursts=1,
                          reader=lambda a, b: NS[left.pop(0) if left else then])


class ScriptedLoad:
    """A load probe whose round readings are `rounds` (other cores, in order; 0 after) and
    whose waits for quiet end quiet (after `wait_s`) or, with `quiet=False`, busy."""

    def __init__(self, rounds: Sequence[float], *, quiet: bool = True,
                 wait_s: float = 0.5) -> None:
        self.rounds, self.quiet, self.wait_s = list(rounds), quiet, wait_s
        self.waits: list[float] = []

    def begin(self) -> object:
        return object()

    def end(self, _mark: object) -> LoadReading:
        cores = self.rounds.pop(0) if self.rounds else 0.0
        return LoadReading(window_s=0.25, other_cores=cores, steal_cores=0.0, limit_cores=0.5)

    def wait_until_quiet(self, timeout_s: float) -> tuple[LoadReading | None, float]:
        self.waits.append(timeout_s)
        cores = 0.0 if self.quiet else 2.0
        return (LoadReading(0.25, cores, 0.0, 0.5),
                self.wait_s if self.quiet else timeout_s)


def sampler(labels: Sequence[str], policy: RoundsPolicy, *, clock: FakeClock | None = None,
            placement: PlacementProbe | None = None, load: object = None,
            per_sample_s: float = 1e-3, busy: Callable[[float], bool] | None = None,
            **kwargs: object
            ) -> tuple[RoundSampler, list[tuple[str, int, int]], FakeClock]:
    """A sampler over fake subjects `labels` on a fake clock; and the subjects' call log.
    While `busy(now)`, the subjects run 1.3x slower."""
    clock = clock or FakeClock()
    log: list[tuple[str, int, int]] = []
    subjects = [FakeSubject(label, clock, log, per_sample_s) for label in labels]
    for subject in subjects:
        if busy is not None:
            subject.busy = busy
    s = RoundSampler(subjects, policy, placement=placement, load=load,  # type: ignore[arg-type]
                     clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]
    return s, log, clock


def states(run: TimingRun) -> list[str]:
    return [r.placement for r in run.rounds]


POLICY = RoundsPolicy(samples=8, min_rounds=4, max_rounds=50, placement_budget_s=100.0,
                      noise_retries=5, noise_budget_s=20.0)


# -- the helpers -------------------------------------------------------------------------------


def test_round_placement_is_mixed_when_before_and_after_differ() -> None:
    assert round_placement(PlacementReading(NEAR, 80), PlacementReading(NEAR, 90)) == NEAR
    assert round_placement(PlacementReading(NEAR, 80), PlacementReading(FAR, 350)) == MIXED
    assert round_placement(PlacementReading(SINGLE), PlacementReading(SINGLE)) == SINGLE


def test_choose_placement_prefers_enough_rounds_then_most_then_the_preferred() -> None:
    assert choose_placement(Counter({FAR: 10, NEAR: 10}), 10) == NEAR
    assert choose_placement(Counter({FAR: 10, NEAR: 3}), 10) == FAR
    assert choose_placement(Counter({FAR: 10, SINGLE: 10, NEAR: 10}), 10) == SINGLE
    assert choose_placement(Counter({FAR: 5, NEAR: 3}), 10) == FAR  # most rounds
    assert choose_placement(Counter({FAR: 4, NEAR: 4}), 10) == NEAR  # tie: preferred
    assert choose_placement(Counter({MIXED: 9, NEAR: 0}), 10) is None
    assert choose_placement(Counter(), 1) is None


def test_sampler_needs_subjects_with_unique_labels() -> None:
    with pytest.raises(ValueError):
        sampler([], POLICY)
    with pytest.raises(ValueError, match="unique"):
        sampler(["a", "a"], POLICY)


# -- when it stops -----------------------------------------------------------------------------


def test_stops_once_every_subject_has_min_rounds_in_near() -> None:
    """Always near: exactly min_rounds rounds of per_round samples each, and no more."""
    s, log, clock = sampler(["a", "b"], POLICY, clock=FakeClock(),
                            placement=probe_by_read([], then=NEAR))
    out = s.run()
    assert isinstance(out, RoundsResult) and out.placement == NEAR and out.notes == []
    assert len(log) == 2 * POLICY.min_rounds
    assert all(n == POLICY.per_round == 2 for _, n, _ in log)
    for run in out.runs.values():
        assert run.placement == NEAR and states(run) == [NEAR] * 4
        assert [r.samples_ms for r in run.rounds] == [[1.0, 1.0]] * 4  # seconds -> ms
        assert all(r.round_trip_ns == [80.0, 80.0] for r in run.rounds)
        assert len(run.usable_rounds(NEAR)) == 4


def test_a_slow_subject_takes_shorter_chunks_and_more_rounds() -> None:
    """At 0.1 s a sample, a chunk is cut to CHUNK_MAX_S (2 samples) after the first (5,
    no history yet), so reaching 20 samples takes 9 rounds, not min_rounds (4)."""
    policy = RoundsPolicy(samples=20, min_rounds=4, max_rounds=50, placement_budget_s=100.0)
    s, log, _ = sampler(["a"], policy, single=True, per_sample_s=0.1)
    out = s.run()
    assert [n for _, n, _ in log] == [5] + [2] * 8
    assert sum(len(r.samples_ms) for r in out.runs["a"].rounds) == 21


def test_samples_are_reached_in_the_target_placement_whatever_the_placement_budget() -> None:
    """The placement budget is for waiting for the vCPUs to *move* to the target
    placement; a run already in it (here single: nothing can move) keeps taking rounds
    until it has `samples` samples, even with no placement budget at all."""
    policy = RoundsPolicy(samples=20, min_rounds=4, max_rounds=50, placement_budget_s=0.0)
    s, _, _ = sampler(["a"], policy, single=True, per_sample_s=0.1)
    out = s.run()
    assert sum(len(r.samples_ms) for r in out.runs["a"].rounds) >= 20


def test_single_needs_no_probe_and_stops_at_min_rounds() -> None:
    """No subject spans CPUs: rounds are single without reading the placement probe."""
    def never(a: int, b: int) -> float:
        raise AssertionError("single runs must not probe the placement")

    s, log, _ = sampler(["a", "b"], POLICY, placement=PlacementProbe([0, 1], reader=never),
                        single=True)
    out = s.run()
    assert out.placement == SINGLE and len(log) == 8
    assert all(states(run) == [SINGLE] * 4 for run in out.runs.values())


def test_without_a_placement_probe_rounds_are_unknown_and_that_is_the_target() -> None:
    s, log, _ = sampler(["a", "b"], POLICY, placement=None)
    assert s.target_placement() == UNKNOWN
    out = s.run()
    assert out.placement == UNKNOWN and len(log) == 8
    assert all(run.placement == UNKNOWN for run in out.runs.values())


def test_a_chunk_whose_placement_changed_is_mixed_and_does_not_count() -> None:
    """The first chunk reads near before and far after it: mixed, kept with both round
    trips but not usable, so its subject needs a fourth round to have three near."""
    policy = RoundsPolicy(samples=3, min_rounds=3, max_rounds=50, placement_budget_s=100.0)
    s, _, _ = sampler(["a", "b"], policy, placement=probe_by_read([NEAR, FAR]))
    out = s.run()
    first = [run for run in out.runs.values() if run.rounds[0].placement == MIXED]
    other = [run for run in out.runs.values() if run.rounds[0].placement == NEAR]
    assert len(first) == 1 and len(other) == 1
    assert first[0].rounds[0].round_trip_ns == [NS[NEAR], NS[FAR]]
    assert len(first[0].rounds) == 4 and len(first[0].usable_rounds()) == 3
    assert states(other[0]) == [NEAR] * 4 and out.placement == NEAR


def contended_probe(clock: FakeClock, busy: Callable[[float], bool],
                    usual: float = 9.0) -> PlacementProbe:
    """Always near; CPU 1's cache reading is 1.5x its usual value while `busy(now)` (a
    guest sharing its core), CPU 0's never moves."""
    return PlacementProbe(
        [0, 1], bursts=1, reader=lambda a, b: NS[NEAR],
        cache_reader=lambda cpu: usual * (1.5 if cpu == 1 and busy(clock.now) else 1.0))


def test_chunks_taken_while_a_core_is_contended_are_left_out_and_taken_again() -> None:
    """Contention from the 10th to the 16th ms of fake time (a minority of the chunks: a
    host contended in most of them has that as its normal, `contention_limit`): the
    chunks around it are labelled contended, kept with their cache readings but not
    usable, and the run goes on until every subject has min_rounds clean near chunks."""
    clock = FakeClock()
    policy = RoundsPolicy(samples=4, min_rounds=4, max_rounds=50, placement_budget_s=100.0,
                          settle_s=0.0)
    s, _, _ = sampler(["a", "b"], policy, clock=clock,
                      placement=contended_probe(clock, lambda t: 0.010 <= t < 0.016),
                      busy=lambda t: 0.010 <= t < 0.016)
    out = s.run()
    assert out.placement == NEAR
    for run in out.runs.values():
        labels = states(run)
        assert CONTENDED in labels and set(labels) == {NEAR, CONTENDED}
        assert len(run.usable_rounds(NEAR)) >= 4 and len(run.rounds) > 4
        busy = [r for r in run.rounds if r.placement == CONTENDED]
        assert all(len(r.cache_ns) == 2 and len(r.cache_ns[0]) == 2 for r in busy)
        assert all(max(v for v in r.cache_ns[0] if v) > 9.0 * CONTENTION_FACTOR
                   for r in busy)
    assert any(e["event"] == "contended" for e in next(iter(out.runs.values())).events)


def test_the_contention_limit_is_the_factor_on_a_tight_host_and_the_spread_on_a_wide_one(
        ) -> None:
    """Zen 5's idle readings sit near their floor: the limit is 1.3x the usual reading.
    A host whose idle readings spread wider (the Cascade Lake hour that dropped 73% of
    the chunks at 1.3x): the median plus 4 robust sigmas, which leaves the spread in and
    still catches a reading far beyond it."""
    rng = np.random.default_rng(0)
    tight = 9.0 * (1 + 0.02 * rng.random(200))
    assert contention_limit(float(np.percentile(tight, 10)), tight) == pytest.approx(
        CONTENTION_FACTOR * np.percentile(tight, 10))
    wide = 9.0 * (1 + 1.0 * rng.random(200))  # floor 9, median about 1.35x its p10
    usual = float(np.percentile(wide, 10))
    limit = contention_limit(usual, wide)
    assert limit > CONTENTION_FACTOR * usual
    assert np.mean(wide > CONTENTION_FACTOR * usual) > 0.5 and np.mean(wide > limit) == 0
    judge = ContentionJudge()
    for value in wide:
        judge.note([[9.0, float(value)]])
    assert judge.contended([[9.0, 9.0 * 3.5]], judge.limits())
    assert not judge.contended([[9.0, float(np.median(wide))]], judge.limits())


def test_contention_is_judged_against_the_whole_runs_usual_reading() -> None:
    """A run that starts inside a contention spell: its first chunks look usual against
    the few readings seen so far, and are relabelled once the run has seen the CPU's
    usual reading."""
    clock = FakeClock()
    policy = RoundsPolicy(samples=4, min_rounds=4, max_rounds=50, placement_budget_s=100.0,
                          settle_s=0.0)
    s, _, _ = sampler(["a", "b"], policy, clock=clock,
                      placement=contended_probe(clock, lambda t: t < 0.005),
                      busy=lambda t: t < 0.005)
    out = s.run()
    for run in out.runs.values():
        assert run.rounds[0].placement == CONTENDED
        assert len(run.usable_rounds(NEAR)) >= 4


def test_a_reading_that_always_looks_contended_is_ignored_not_fatal() -> None:
    """If every chunk read as contended (a probe that says nothing useful), contention is
    ignored and the figure comes from the placement, with an event saying so."""
    s = RoundSampler([FakeSubject("a", FakeClock(), [])], RoundsPolicy(min_rounds=2),
                     placement=None, load=None)
    from dlas.measure.rounds import _Chunk, _Round

    chunk = _Chunk(NEAR, [80.0, 80.0], [1e-3], state=NEAR, cache_ns=[[20.0, 9.0]])
    for _ in range(10):
        s.contention.note([[9.0, 9.0]])
    verdict, slow = s._relabel([_Round(0, False, None, 0.0, {"a": chunk})])
    assert verdict.contended == 0 and verdict.ignored == "every chunk read as contended"
    assert slow.flagged == 0
    assert chunk.placement == NEAR
    assert CONTENTION_FACTOR > 1.0


def _judged(factor: float, flagged_subjects: Sequence[str]) -> tuple[ContentionJudge, list]:
    """A judge that has seen CPU readings of 9 ns/KiB, and chunks of subjects a, b, c in
    near placement: six each at the usual reading, and three each of `flagged_subjects`
    at 1.5x it whose samples take `factor` times as long."""
    from dlas.measure.rounds import _Chunk

    judge = ContentionJudge()
    for _ in range(30):
        judge.note([[9.0, 9.0]])
    rng = np.random.default_rng(0)
    chunks = []
    for subject, ms in (("a", 1.0), ("b", 2.0), ("c", 5.0)):
        for _ in range(6):
            chunks.append((subject, _Chunk(NEAR, [80.0, 80.0],
                                           list(ms * 1e-3 * (1 + 0.01 * rng.random(5))),
                                           state=NEAR, cache_ns=[[9.0, 9.0]])))
        if subject in flagged_subjects:
            for _ in range(3):
                chunks.append((subject, _Chunk(NEAR, [80.0, 80.0],
                                               [ms * 1e-3 * factor] * 5, state=NEAR,
                                               cache_ns=[[9.0, 13.5]])))
    return judge, chunks


def test_flags_stand_only_where_the_flagged_chunks_ran_slower() -> None:
    """The Zen 4 quickstart: one CPU's readings sat in two modes with nothing else
    running, and the limit flagged chunks that ran as fast as their variants' others.
    Flagged chunks that ran no slower lift every flag, with the reason; flagged chunks
    that ran 1.2x slower are left out; too few flagged to tell are left out too."""
    judge, chunks = _judged(1.0, "abc")
    verdict = judge.relabel(chunks)
    assert verdict.contended == 0 and verdict.ignored and "not slowed" in verdict.ignored
    assert verdict.slowdown == pytest.approx(1.0, abs=0.02)
    assert all(c.placement == NEAR for _, c in chunks)

    judge, chunks = _judged(1.2, "abc")
    verdict = judge.relabel(chunks)
    assert verdict.contended == 9 and verdict.ignored is None
    assert verdict.slowdown == pytest.approx(1.2, abs=0.02)
    assert sum(c.placement == CONTENDED for _, c in chunks) == 9

    judge, chunks = _judged(1.0, "a")  # 3 flagged: fewer than CONFIRM_MIN_CHUNKS
    assert CONFIRM_MIN_CHUNKS > 3
    verdict = judge.relabel(chunks)
    assert verdict.contended == 3 and verdict.ignored is None


def test_readings_that_flag_chunks_running_at_full_speed_leave_none_out() -> None:
    """A whole run whose cache readings jump a third of the time while the variants run
    at their usual speed: the first flagged chunks are left out while too few are
    flagged to tell, then every flag is lifted and the run stops with all its chunks
    usable, recording why."""
    clock = FakeClock()
    policy = RoundsPolicy(samples=4, min_rounds=4, max_rounds=50, placement_budget_s=100.0,
                          settle_s=0.0)
    busy = lambda t: int(t * 1000) % 3 == 0  # noqa: E731 - the readings' spells
    s, _, _ = sampler(["a", "b", "c"], policy, clock=clock,
                      placement=contended_probe(clock, busy))
    out = s.run()
    events = next(iter(out.runs.values())).events
    ignored = [e for e in events if e["event"] == "contention_ignored"]
    assert ignored and "not slowed" in str(ignored[0]["reason"])
    assert not any(e["event"] == "contended" for e in events)
    assert any("none left out" in note for note in out.notes), out.notes
    for run in out.runs.values():
        assert CONTENDED not in states(run)
        assert any(r.cache_ns[0][1] > 9.0 * CONTENTION_FACTOR for r in run.rounds)


def test_far_is_used_only_after_the_placement_budget() -> None:
    """Always far: once every subject has min_rounds far rounds the sampler keeps going
    until placement_budget_s has passed since then, says why, and stops at the first
    round end after the budget; the figure is far."""
    policy = RoundsPolicy(samples=6, min_rounds=3, max_rounds=60, placement_budget_s=5.0)
    ends: list[float] = []
    said: list[str] = []
    clock = FakeClock()
    s, _, _ = sampler(["a", "b"], policy, clock=clock,
                      placement=probe_by_time(clock, lambda t: FAR), per_sample_s=0.1,
                      say=said.append, on_round=lambda i, st, rt: ends.append(clock.now))
    out = s.run()
    assert out.placement == FAR and all(run.placement == FAR for run in out.runs.values())
    enough_at = ends[policy.min_rounds - 1]
    assert ends[-1] - enough_at >= policy.placement_budget_s
    assert ends[-2] - enough_at < policy.placement_budget_s
    assert len(ends) > policy.min_rounds + 5
    assert any("enough rounds in far placement" in line for line in said)


def test_near_arriving_within_the_placement_budget_is_waited_for() -> None:
    """Far for the first 2 s, near after: the sampler waits past its far rounds and stops
    once near has min_rounds, with the figure in near."""
    policy = RoundsPolicy(samples=6, min_rounds=3, max_rounds=60, placement_budget_s=100.0)
    clock = FakeClock()
    s, _, _ = sampler(["a", "b"], policy, clock=clock, per_sample_s=0.1,
                      placement=probe_by_time(clock, lambda t: FAR if t < 2.0 else NEAR))
    out = s.run()
    assert out.placement == NEAR and clock.now < 10.0
    for run in out.runs.values():
        assert run.placement == NEAR
        assert states(run)[-3:] == [NEAR] * 3 and FAR in states(run)
    # it stopped in the first round after which both subjects had three near rounds
    assert min(len(run.usable_rounds(NEAR)) for run in out.runs.values()) == 3


def test_max_rounds_bounds_a_machine_that_never_settles() -> None:
    """Erratic readings forever: max_rounds rounds, then a figure flagged by a note; far
    forever with an endless placement budget: max_rounds rounds, in far."""
    policy = RoundsPolicy(samples=4, min_rounds=2, max_rounds=7, placement_budget_s=1e9)
    s, log, _ = sampler(["a", "b"], policy, placement=probe_by_read([], then=ERRATIC))
    out = s.run()
    assert len(log) == 14 and all(len(run.rounds) == 7 for run in out.runs.values())
    assert out.placement not in (NEAR, FAR) and out.notes
    assert all(run.usable_rounds() == [] for run in out.runs.values())

    s, log, _ = sampler(["a", "b"], policy, placement=probe_by_read([], then=FAR))
    out = s.run()
    assert len(log) == 14 and out.placement == FAR and out.notes == []


def test_rounds_that_never_settle_stop_at_the_placement_budget() -> None:
    """Erratic readings forever with a 2 s placement budget: the sampler stops at the
    first round end 2 s after it had min_rounds rounds (well before max_rounds)."""
    policy = RoundsPolicy(samples=4, min_rounds=2, max_rounds=60, placement_budget_s=2.0)
    ends: list[float] = []
    clock = FakeClock()
    s, _, _ = sampler(["a", "b"], policy, clock=clock, per_sample_s=0.1,
                      placement=probe_by_read([], then=ERRATIC),
                      on_round=lambda i, st, rt: ends.append(clock.now))
    out = s.run()
    since = ends[policy.min_rounds - 1]
    assert ends[-1] - since >= 2.0 > ends[-2] - since
    assert policy.min_rounds < len(ends) < policy.max_rounds and out.notes


# -- load --------------------------------------------------------------------------------------


def test_a_loaded_round_is_discarded_and_taken_again_after_waiting() -> None:
    """The first round reads 2 other cores: the sampler waits (with the whole noise
    budget), then takes the round again; no loaded round is kept, and the discarded
    round's index is not reused."""
    load = ScriptedLoad([2.0])
    said: list[str] = []
    policy = RoundsPolicy(samples=3, min_rounds=3, max_rounds=50, placement_budget_s=0.0,
                          noise_retries=5, noise_budget_s=20.0)
    s, log, _ = sampler(["a", "b"], policy, load=load, single=True, say=said.append)
    out = s.run()
    assert load.waits == [20.0] and len(log) == 8
    for run in out.runs.values():
        assert [r.index for r in run.rounds] == [1, 2, 3]
        assert run.loaded_rounds() == [] and len(run.usable_rounds(SINGLE)) == 3
        # the busiest other processes are named (whatever runs beside the test)
        assert all(isinstance(e.get("busiest"), list) for e in run.events)
        assert [{k: v for k, v in e.items() if k != "busiest"} for e in run.events] == [
            {"event": "retaken", "round": 0, "other_cores": 2.0, "waited_s": 0.5}]
    assert "machine busy" in said[0] and "2.00 cores" in said[0]


def test_retakes_stop_at_noise_retries_then_loaded_rounds_are_kept() -> None:
    """Every round is loaded and every wait ends quiet: two re-takes (the limit), then
    loaded rounds are kept and marked, without further waiting, and the figure uses them
    with a note."""
    load = ScriptedLoad([1.5] * 100)
    policy = RoundsPolicy(samples=3, min_rounds=3, max_rounds=50, placement_budget_s=0.0,
                          noise_retries=2, noise_budget_s=20.0)
    s, _, _ = sampler(["a", "b"], policy, load=load, placement=probe_by_read([]))
    out = s.run()
    assert len(load.waits) == 2
    run = out.runs["a"]
    assert [e["event"] for e in run.events] == ["retaken"] * 2 + ["kept_loaded"] * 3
    assert [r.index for r in run.rounds] == [2, 3, 4]
    assert len(run.loaded_rounds()) == 3 and run.usable_rounds() == []
    assert all(r.other_cores == 1.5 for r in run.rounds)
    assert out.placement == NEAR and out.notes


def test_load_outlasting_the_noise_budget_is_waited_once_then_kept() -> None:
    """A real `CpuLoadProbe` on the fake clock, with two other cores busy forever: the
    first loaded round waits out the 1 s noise budget and is kept; later loaded rounds are
    kept at once."""
    clock = FakeClock()
    load = CpuLoadProbe(2, cpus=[0, 1], clock=clock, sleep=clock.sleep,
                        reader=lambda c: (2.0 * clock.now, 0.0, 0.0))
    policy = RoundsPolicy(samples=3, min_rounds=3, max_rounds=50, placement_budget_s=0.0,
                          noise_retries=5, noise_budget_s=1.0)
    s, _, _ = sampler(["a", "b"], policy, clock=clock, load=load, single=True)
    out = s.run()
    run = out.runs["a"]
    assert [e["event"] for e in run.events] == ["kept_loaded"] * 3
    assert 0.5 <= run.events[0]["waited_s"] <= 1.0
    assert "waited_s" not in run.events[1]
    assert len(run.rounds) == 3 and all(r.loaded for r in run.rounds)
    assert all(r.other_cores == pytest.approx(2.0) for r in run.rounds)
    assert clock.now < 3.0


def test_load_that_stops_during_the_wait_gives_a_clean_retake() -> None:
    """A real `CpuLoadProbe` on the fake clock; others stop at 0.5 s: the first round is
    loaded, the probe's polls see the load end, and every kept round is clean."""
    clock = FakeClock()
    load = CpuLoadProbe(2, cpus=[0, 1], clock=clock, sleep=clock.sleep,
                        reader=lambda c: (2.0 * min(clock.now, 0.5), 0.0, 0.0))
    policy = RoundsPolicy(samples=3, min_rounds=3, max_rounds=50, placement_budget_s=0.0)
    s, _, _ = sampler(["a", "b"], policy, clock=clock, load=load, single=True)
    run = s.run().runs["b"]
    assert [e["event"] for e in run.events] == ["retaken"]
    assert run.events[0]["waited_s"] >= 0.3
    assert [r.index for r in run.rounds] == [1, 2, 3]
    assert all(not r.loaded and r.other_cores == 0.0 for r in run.rounds)


# -- order, warm-up and records ----------------------------------------------------------------


def orders(labels: Sequence[str], seed: int, rounds: int = 10) -> list[tuple[str, ...]]:
    """The order the subjects were timed in, per round, for `seed`."""
    policy = RoundsPolicy(samples=rounds, min_rounds=rounds, placement_budget_s=0.0)
    s, log, _ = sampler(labels, policy, single=True, seed=seed)
    s.run()
    k = len(labels)
    return [tuple(label for label, _, _ in log[i:i + k]) for i in range(0, len(log), k)]


def test_the_order_within_rounds_is_random_and_reproducible() -> None:
    """Every round times every subject once, in an order that varies between rounds,
    repeats exactly for the same seed and differs for another seed."""
    labels = ["a", "b", "c", "d"]
    first = orders(labels, seed=0)
    assert len(first) == 10 and all(sorted(o) == labels for o in first)
    assert len(set(first)) > 3
    assert Counter(o[0] for o in first).most_common(1)[0][1] < 10  # not always "a" first
    assert orders(labels, seed=0) == first
    assert orders(labels, seed=1) != first


def test_rounds_record_each_chunks_position_and_predecessor() -> None:
    policy = RoundsPolicy(samples=5, min_rounds=5, placement_budget_s=0.0)
    s, log, _ = sampler(["a", "b", "c"], policy, single=True, seed=3)
    out = s.run()
    for i in range(5):
        order = [label for label, _, _ in log[3 * i:3 * i + 3]]
        for position, label in enumerate(order):
            r = out.runs[label].rounds[i]
            assert r.position == position
            assert r.previous == (order[position - 1] if position else None)
    assert [r.at_s for r in out.runs["a"].rounds] == sorted(r.at_s for r in
                                                           out.runs["a"].rounds)


def test_the_first_chunk_of_each_subject_gets_a_warm_up_call() -> None:
    """With warmup=0, round 0 still warms every subject up once; later chunks do not. A
    larger warm-up applies to every chunk."""
    policy = RoundsPolicy(samples=3, min_rounds=3, placement_budget_s=0.0, warmup=0)
    s, log, _ = sampler(["a", "b"], policy, single=True)
    s.run()
    assert [w for _, _, w in log] == [1, 1, 0, 0, 0, 0]
    policy = RoundsPolicy(samples=3, min_rounds=3, placement_budget_s=0.0, warmup=3)
    s, log, _ = sampler(["a", "b"], policy, single=True)
    s.run()
    assert [w for _, _, w in log] == [3] * 6


def test_later_chunks_warm_up_for_warmup_s_at_the_time_per_call_last_read() -> None:
    """From its second chunk on, a variant discards enough calls to run `warmup_s` at its
    last chunk's time per call (10 ms: 10 calls of 1 ms, 3 of 4 ms), never fewer than the
    policy's count; the first round warms up by the count alone (no time per call yet),
    and the run's policy records the seconds."""
    clock = FakeClock()
    log: list[tuple[str, int, int]] = []
    subjects = [FakeSubject("fast", clock, log, 1e-3), FakeSubject("slow", clock, log, 4e-3)]
    policy = RoundsPolicy(samples=3, min_rounds=3, placement_budget_s=0.0, warmup=1,
                          warmup_s=0.01)
    out = RoundSampler(subjects, policy, placement=None, load=None, single=True,
                       clock=clock, sleep=clock.sleep).run()
    warm = {label: [w for name, _, w in log if name == label] for label in ("fast", "slow")}
    assert warm == {"fast": [1, 10, 10], "slow": [1, 3, 3]}
    assert out.runs["fast"].policy["warmup_s"] == 0.01
    log.clear()
    policy = RoundsPolicy(samples=3, min_rounds=3, placement_budget_s=0.0, warmup=5,
                          warmup_s=0.01)
    RoundSampler(subjects, policy, placement=None, load=None, single=True,
                 clock=clock, sleep=clock.sleep).run()
    assert [w for name, _, w in log if name == "slow"] == [5, 5, 5]


def test_every_subjects_run_shares_the_run_id_and_round_indices() -> None:
    """The runs pair by (run_id, round index); each names the others it was interleaved
    with, and carries the policy, source, threads and (when pinned) its CPUs."""
    policy = RoundsPolicy(samples=4, min_rounds=4, placement_budget_s=0.0)
    before = time.time()
    s, _, _ = sampler(["a", "b", "c"], policy, placement=probe_by_read([]),
                      source="remeasure", threads=2, pinned=True)
    out = s.run()
    runs = out.runs
    assert set(runs) == {"a", "b", "c"}
    assert len({run.run_id for run in runs.values()}) == 1
    assert len({tuple(r.index for r in run.rounds) for run in runs.values()}) == 1
    assert runs["a"].interleaved_with == ["b", "c"]
    assert runs["b"].interleaved_with == ["a", "c"]
    for run in runs.values():
        assert run.policy == policy.as_dict() and run.source == "remeasure"
        assert run.threads == 2 and run.cpus == [0, 1]
        assert before <= run.started_at <= time.time() and run.seconds > 0
    s2, _, _ = sampler(["a", "b", "c"], policy, placement=probe_by_read([]))
    other = s2.run().runs["a"]
    assert other.run_id != runs["a"].run_id and other.cpus == []


def test_on_round_reports_each_kept_round() -> None:
    seen: list[tuple[int, str, float | None]] = []
    policy = RoundsPolicy(samples=3, min_rounds=3, placement_budget_s=0.0)
    s, _, _ = sampler(["a", "b"], policy, placement=probe_by_read([]),
                      on_round=lambda i, st, rt: seen.append((i, st, rt)))
    s.run()
    assert seen == [(1, NEAR, 80.0), (2, NEAR, 80.0), (3, NEAR, 80.0)]


# -- real load on this machine -----------------------------------------------------------------


class CheapCall:
    """About 0.1 ms of Python per sample: something real to time."""

    def __init__(self, label: str) -> None:
        self.label, self.cpus = label, [0, 1]

    def time(self, n: int, warmup: int) -> list[float]:
        for _ in range(warmup):
            sum(range(2000))
        out = []
        for _ in range(n):
            start = time.perf_counter()
            sum(range(2000))
            out.append(time.perf_counter() - start)
        return out


def test_real_busy_loops_make_a_round_that_is_taken_again_clean() -> None:
    """Two real busy-loop processes run while two cheap calls are timed, and stop 0.5 s
    later. The round taken under them is discarded, the sampler waits for quiet, and every
    round it keeps is clean. The load probe counts only those children's CPU time, so the
    test depends on the load it makes, not on what else shares the machine."""
    procs = busy_loops(2)
    timer = threading.Timer(0.5, stop, args=(procs,))
    try:
        load = CpuLoadProbe(2, cpus=[0, 1], reader=children_reader(procs),
                            margin_cores=0.0, min_window_s=0.25)
        policy = RoundsPolicy(samples=20, min_rounds=4, max_rounds=20,
                              placement_budget_s=0.0, noise_retries=3, noise_budget_s=5.0)
        s = RoundSampler([CheapCall("x"), CheapCall("y")], policy, placement=None,
                         load=load)
        timer.start()
        start = time.perf_counter()
        out = s.run()
        took = time.perf_counter() - start
    finally:
        timer.cancel()
        if timer.is_alive():
            timer.join()
        stop(procs)
    assert took < 6.0
    for run in out.runs.values():
        assert run.events and run.events[0]["event"] == "retaken", run.events
        assert run.events[0]["other_cores"] > load.limit(0.25)
        assert run.loaded_rounds() == [] and len(run.usable_rounds(UNKNOWN)) == 4
        assert run.rounds[0].index >= 1
        assert sum(len(r.samples_ms) for r in run.rounds) >= 20
    assert out.placement == UNKNOWN and out.notes == []


def test_a_wait_for_near_placement_records_whether_it_got_there() -> None:
    """Far throughout: the run's events hold a wait that did not reach near, with its
    length; far for 2 s, then near: a wait that did; near from the start: no wait."""
    for state_at, reached in ((lambda t: FAR, False),
                              (lambda t: FAR if t < 2.0 else NEAR, True),
                              (lambda t: NEAR, None)):
        policy = RoundsPolicy(samples=6, min_rounds=3, max_rounds=60, placement_budget_s=5.0)
        clock = FakeClock()
        s, _, _ = sampler(["a", "b"], policy, clock=clock, per_sample_s=0.1,
                          placement=probe_by_time(clock, state_at))
        out = s.run()
        for run in out.runs.values():
            waits = [e for e in run.events if e["event"] == "placement_wait"]
            if reached is None:
                assert not waits
                continue
            assert len(waits) == 1 and waits[0]["reached"] is reached
            assert waits[0]["target"] == NEAR and waits[0]["placement"] == run.placement
            assert (waits[0]["seconds"] >= policy.placement_budget_s) is not reached


def test_without_the_target_wait_far_rounds_stop_at_once_and_record_no_wait() -> None:
    """Far throughout with `target_wait` off: the run stops in the round in which every
    subject has min_rounds far rounds, says nothing of waiting and records no wait."""
    policy = RoundsPolicy(samples=6, min_rounds=3, max_rounds=60, placement_budget_s=5.0,
                          target_wait=False)
    clock = FakeClock()
    said: list[str] = []
    s, _, _ = sampler(["a", "b"], policy, clock=clock, per_sample_s=0.1, say=said.append,
                      placement=probe_by_time(clock, lambda t: FAR))
    out = s.run()
    assert out.placement == FAR
    for run in out.runs.values():
        assert len(run.rounds) == policy.min_rounds
        assert not [e for e in run.events if e["event"] == "placement_wait"]
    assert not any("enough rounds in" in line for line in said)
