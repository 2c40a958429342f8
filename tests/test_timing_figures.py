"""A point's latency columns from its timing runs (`dlas.results.latency`): which placement
the headline figure is taken in, the per-placement figures, what is done with runs taken
on a busy machine, when a row is noisy, the spread between runs, and legacy entries. The
runs are built by hand so each test knows the figures to expect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from dlas.measure.placement import ERRATIC, FAR, NEAR, SINGLE, UNKNOWN
from dlas.measure.record import TimingRound, TimingRun
from dlas.results.latency import groups, latency_columns, legacy_run
from dlas.results.statistics import summarize


def rnd(index: int, placement: str, samples: Sequence[float], *, loaded: bool = False,
        rt: Sequence[float | None] = (), other: float | None = None) -> TimingRound:
    return TimingRound(index=index, placement=placement, samples_ms=list(samples),
                       loaded=loaded, round_trip_ns=list(rt), other_cores=other)


def run(run_id: str, rounds: Sequence[TimingRound], *, min_rounds: int | None = 10,
        events: Sequence[dict[str, Any]] = (), placement: str = NEAR) -> TimingRun:
    policy = {} if min_rounds is None else {"min_rounds": min_rounds}
    return TimingRun(run_id=run_id, started_at=1.0, placement=placement, rounds=list(rounds),
                     policy=policy, events=list(events))


def steady(placement: str, center: float, count: int, start: int = 0, *,
           per_round: int = 5, seed: int = 0, rt: float | None = None,
           loaded: bool = False, other: float | None = None) -> list[TimingRound]:
    """`count` rounds in `placement` of samples within 0.5% of `center` ms."""
    rng = np.random.default_rng(seed)
    return [rnd(start + i, placement, (center * (1 + rng.uniform(-0.005, 0.005, per_round)))
                .tolist(), rt=(rt, rt) if rt is not None else (), loaded=loaded, other=other)
            for i in range(count)]


# -- headline placement ------------------------------------------------------------------------


def test_near_is_the_headline_and_every_placement_has_its_figures() -> None:
    """10 near rounds at 1 ms and 10 far at 2 ms (interleaved in time): the row's figures
    are near's; `latency_by_placement` has both, each with its own median and interval."""
    rounds = sorted(steady(NEAR, 1.0, 10, 0, rt=80) + steady(FAR, 2.0, 10, 10, rt=350),
                    key=lambda r: r.index % 10)
    cols = latency_columns([run("r1", rounds)], ci_threshold=0.05)
    assert cols["placement"] == NEAR
    assert cols["latency_median_ms"] == pytest.approx(1.0, rel=0.01)
    assert cols["latency_ci_low_ms"] <= cols["latency_median_ms"] <= cols["latency_ci_high_ms"]
    assert len(cols["latency_samples_ms"]) == 50 and max(cols["latency_samples_ms"]) < 1.01
    by = cols["latency_by_placement"]
    assert set(by) == {NEAR, FAR}
    assert by[FAR]["median_ms"] == pytest.approx(2.0, rel=0.01)
    assert by[FAR]["ci_low_ms"] > by[NEAR]["ci_high_ms"]
    assert by[NEAR] == {**by[NEAR], "samples": 50, "rounds": 10, "runs": 1}
    assert cols["placement_round_trip_ns"] == 80.0
    assert cols["timing_rounds"] == 10 and cols["noisy"] == 0


def test_far_is_the_headline_when_only_far_has_enough_rounds() -> None:
    rounds = steady(NEAR, 1.0, 3) + steady(FAR, 2.0, 10, 3)
    cols = latency_columns([run("r1", rounds, min_rounds=10)], 0.05)
    assert cols["placement"] == FAR
    assert cols["latency_median_ms"] == pytest.approx(2.0, rel=0.01)
    assert cols["latency_by_placement"][NEAR]["rounds"] == 3


def test_single_comes_first() -> None:
    rounds = steady(NEAR, 1.0, 10) + steady(SINGLE, 3.0, 10, 10)
    cols = latency_columns([run("r1", rounds)], 0.05)
    assert cols["placement"] == SINGLE
    assert cols["latency_median_ms"] == pytest.approx(3.0, rel=0.01)


def test_min_rounds_comes_from_the_runs_policy() -> None:
    """Without a policy, one round is enough: near's 2 rounds beat far's 10."""
    rounds = steady(NEAR, 1.0, 2) + steady(FAR, 2.0, 10, 2)
    assert latency_columns([run("r1", rounds, min_rounds=None)], 0.05)["placement"] == NEAR
    assert latency_columns([run("r1", rounds, min_rounds=5)], 0.05)["placement"] == FAR


def test_only_mixed_rounds_are_used_and_flagged() -> None:
    """No round had a steady placement: the figure comes from the mixed rounds and the row
    says so."""
    cols = latency_columns([run("r1", steady("mixed", 1.5, 4))], 0.05)
    assert cols["placement"] == "mixed"
    assert cols["latency_median_ms"] == pytest.approx(1.5, rel=0.01)
    assert cols["noisy"] == 1 and "no round had a steady placement" in cols["noise_reason"]


def test_only_erratic_rounds_are_flagged() -> None:
    """Erratic means the probe itself was disturbed (`TimingRun.usable_rounds` and the
    sampler do not count such rounds): a row whose rounds are all erratic has no steady
    placement and must be flagged, like an all-mixed one."""
    cols = latency_columns([run("r1", steady(ERRATIC, 1.5, 10, rt=5000))], 0.05)
    assert cols["noisy"] == 1 and "steady placement" in (cols["noise_reason"] or "")


# -- runs and load -----------------------------------------------------------------------------


def test_runs_with_loaded_rounds_are_left_out_when_clean_runs_exist() -> None:
    clean = run("clean", steady(NEAR, 1.0, 10))
    busy = run("busy", steady(NEAR, 1.0, 9) + [rnd(9, NEAR, [5.0] * 5, loaded=True,
                                                      other=1.8)],
               events=[{"event": "kept_loaded", "round": 9}])
    cols = latency_columns([clean, busy], 0.05)
    assert cols["noisy"] == 0 and cols["noise_reason"] is None
    assert cols["loaded_rounds"] == 0 and cols["load_other_cores"] is None
    assert max(cols["latency_samples_ms"]) < 1.01 and len(cols["latency_samples_ms"]) == 50
    assert cols["timing_runs"] == 2 and cols["timing_rounds"] == 10
    assert cols["latency_by_placement"][NEAR]["runs"] == 1
    assert [r["run_id"] for r in cols["noise_log"]["runs"]] == ["clean", "busy"]


def test_only_loaded_runs_are_used_and_the_row_is_flagged() -> None:
    """No clean run: the loaded rounds are used (their samples are in the figure) and the
    row is noisy, saying how many rounds and how busy the machine was."""
    busy = run("busy", steady(NEAR, 1.0, 8) + [rnd(8, NEAR, [1.05] * 5, loaded=True, other=1.8),
                                              rnd(9, NEAR, [1.05] * 5, loaded=True, other=1.2)],
               events=[{"event": "retaken", "round": 0}, {"event": "kept_loaded"}])
    cols = latency_columns([busy], ci_threshold=10.0)  # the interval aside: load decides
    assert cols["noisy"] == 1
    assert "2 round(s) taken while other processes kept the CPUs busy (up to 1.80 cores)" \
        in cols["noise_reason"]
    assert cols["loaded_rounds"] == 2 and cols["load_other_cores"] == 1.8
    assert cols["load_retries"] == 1
    assert len(cols["latency_samples_ms"]) == 50 and max(cols["latency_samples_ms"]) == 1.05


def test_a_wide_interval_flags_the_row() -> None:
    """Rounds spread over 1.00-1.09 ms (none disturbed) give an interval of some width
    `rel` of the median: a threshold below it flags the row, saying so, one above does
    not; steady rounds give a far narrower interval."""
    rng = np.random.default_rng(1)
    rounds = [rnd(i, NEAR, (c * (1 + rng.uniform(-0.002, 0.002, 5))).tolist())
              for i, c in enumerate(rng.permutation(np.linspace(1.0, 1.09, 10)))]
    runs = [run("r1", rounds)]
    cols = latency_columns(runs, 1.0)
    rel = (cols["latency_ci_high_ms"] - cols["latency_ci_low_ms"]) / cols["latency_median_ms"]
    assert cols["disturbed_chunks"] == 0 and 0.02 < rel < 0.1
    assert cols["noisy"] == 0 and cols["noise_reason"] is None
    tight = latency_columns(runs, rel / 2)
    assert tight["noisy"] == 1 and tight["noise_reason"].startswith("95% CI ")
    assert f"> {rel / 2:.0%}" in tight["noise_reason"]
    steady_cols = latency_columns([run("r2", steady(NEAR, 1.0, 10))], 0.05)
    steady_rel = (steady_cols["latency_ci_high_ms"] - steady_cols["latency_ci_low_ms"]) \
        / steady_cols["latency_median_ms"]
    assert steady_rel * 5 < rel and steady_cols["noisy"] == 0


def test_run_spread_is_the_gap_between_run_medians() -> None:
    a = run("a", steady(NEAR, 1.0, 10))
    b = run("b", steady(NEAR, 1.05, 10, seed=1))
    cols = latency_columns([a, b], 0.5)
    assert cols["run_spread"] == pytest.approx(0.05, rel=0.1)
    assert cols["timing_rounds"] == 20 and cols["disturbed_chunks"] == 0
    assert cols["latency_by_placement"][NEAR]["runs"] == 2
    assert latency_columns([a], 0.05)["run_spread"] is None


# -- disturbed chunks --------------------------------------------------------------------------


def test_disturbed_chunks_are_left_out_and_counted() -> None:
    """10 chunks at 1.0 ms and 3 at 1.5 ms (slower than 1.10x the lower quartile of the
    chunk medians): the figure is 1.0 ms, the 3 are counted, and a minority of disturbed
    chunks does not flag the row. The spread is over the undisturbed chunks too."""
    rounds = steady(NEAR, 1.0, 10) + steady(NEAR, 1.5, 3, 10)
    cols = latency_columns([run("r1", rounds)], 0.05)
    assert cols["disturbed_chunks"] == 3 and cols["noisy"] == 0
    assert cols["latency_median_ms"] == pytest.approx(1.0, rel=0.01)
    assert len(cols["latency_samples_ms"]) == 50
    assert cols["latency_by_placement"][NEAR]["rounds"] == 10
    assert set(groups([run("r1", rounds)], NEAR)) == {("r1", i) for i in range(10)}
    # under the 1.10x bound is kept
    kept = latency_columns([run("r1", steady(NEAR, 1.0, 10) + steady(NEAR, 1.08, 3, 10))],
                           1.0)
    assert kept["disturbed_chunks"] == 0 and len(kept["latency_samples_ms"]) == 65


def test_a_majority_of_disturbed_chunks_flags_the_row() -> None:
    """4 chunks at 1.0 ms and 9 at 1.5 ms: the lower quartile is still 1.0, so the 1.5 ms
    majority is left out, and because disturbed chunks outnumber kept ones, the row says
    so."""
    rounds = steady(NEAR, 1.0, 4) + steady(NEAR, 1.5, 9, 4)
    cols = latency_columns([run("r1", rounds, min_rounds=4)], 10.0)
    assert cols["disturbed_chunks"] == 9 and cols["noisy"] == 1
    assert "9 of 13 chunks disturbed" in cols["noise_reason"]


def test_too_few_chunks_for_a_floor_keep_them_all() -> None:
    """Under four chunks in a placement there is no lower quartile to judge by."""
    rounds = steady(NEAR, 1.0, 2) + steady(NEAR, 2.0, 1, 2)
    cols = latency_columns([run("r1", rounds, min_rounds=3)], 10.0)
    assert cols["disturbed_chunks"] == 0 and len(cols["latency_samples_ms"]) == 15


def test_summary_columns_describe_the_headline_samples() -> None:
    rounds = steady(NEAR, 1.0, 10) + steady(FAR, 2.0, 10, 10)
    cols = latency_columns([run("r1", rounds)], 0.05)
    s = summarize(cols["latency_samples_ms"])
    assert (cols["latency_mean_ms"], cols["latency_std_ms"], cols["latency_cv"]) == \
        (s.mean, s.std, s.cv)
    assert (cols["latency_min_ms"], cols["latency_max_ms"]) == (s.min, s.max)
    assert (cols["latency_q1_ms"], cols["latency_q3_ms"]) == (s.q1, s.q3)


def test_a_row_needs_a_run() -> None:
    with pytest.raises(ValueError):
        latency_columns([], 0.05)


# -- legacy entries and groups -----------------------------------------------------------------


def test_a_legacy_entry_is_one_run_of_one_unknown_round() -> None:
    old = legacy_run([1.0, 1.1, 0.9], started_at=1234.0, noise={"loaded_samples": 3})
    assert old.run_id == "legacy-1234" and old.placement == UNKNOWN
    assert len(old.rounds) == 1 and old.rounds[0].loaded
    assert old.rounds[0].samples_ms == [1.0, 1.1, 0.9]
    assert not legacy_run([1.0]).rounds[0].loaded
    cols = latency_columns([legacy_run([1.0, 1.1, 0.9, 1.05])], 1.0)
    assert cols["placement"] == UNKNOWN and cols["latency_median_ms"] == pytest.approx(1.025)
    assert cols["timing_rounds"] == 1 and cols["noisy"] == 0


def test_a_new_run_with_enough_near_rounds_outranks_a_legacy_entry() -> None:
    cols = latency_columns([legacy_run([3.0] * 150), run("new", steady(NEAR, 1.0, 10))],
                           0.05)
    assert cols["placement"] == NEAR and cols["latency_median_ms"] == pytest.approx(1.0,
                                                                                    rel=0.01)
    assert set(cols["latency_by_placement"]) == {NEAR, UNKNOWN}


def test_groups_are_keyed_by_run_and_round_and_filtered() -> None:
    r = run("r", [rnd(0, NEAR, [1.0]), rnd(1, FAR, [2.0]), rnd(2, NEAR, [3.0], loaded=True),
                  rnd(3, NEAR, [4.0])])
    assert groups([r], NEAR) == {("r", 0): [1.0], ("r", 3): [4.0]}
    assert groups([r], NEAR, allow_loaded=True) == {("r", 0): [1.0], ("r", 2): [3.0],
                                                    ("r", 3): [4.0]}
    assert groups([r], FAR) == {("r", 1): [2.0]}
    assert groups([r], SINGLE) == {}
