"""The statistics every timing figure goes through (`dlas.results.statistics`): summaries,
the hierarchical bootstrap interval of a median, and the verdict of a comparison. The
data are drawn from known distributions with fixed seeds, so each test knows the truth the
interval must bracket or the verdict must reach."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dlas.results.statistics import (
    Comparison,
    GroupKey,
    Interval,
    _Nested,
    compare,
    log_ratio,
    median_ci,
    pooled,
    summarize,
)

Groups = dict[GroupKey, list[float]]


def rounds_of(rng: np.random.Generator, *, rounds: int = 10, per_round: int = 15,
              center: float = 1.0, between: float = 0.0, within: float = 0.1,
              run: str = "run") -> Groups:
    """`rounds` groups of normal samples around `center`; each round shifted by its own
    normal offset of scale `between` (what a placement or frequency change does)."""
    offsets = rng.normal(0.0, between, rounds) if between > 0 else np.zeros(rounds)
    return {(run, i): (center + offsets[i] + rng.normal(0.0, within, per_round)).tolist()
            for i in range(rounds)}


# -- summarize ---------------------------------------------------------------------------------


def test_summarize_reports_the_quartiles_and_spread_of_known_samples() -> None:
    """Median, mean, population std, extremes and quartiles of 1..9 are what numpy's
    definitions give; cv is std / mean."""
    s = summarize(range(1, 10))
    assert (s.n, s.median, s.mean, s.min, s.max) == (9, 5.0, 5.0, 1.0, 9.0)
    assert (s.q1, s.q3, s.iqr) == (3.0, 7.0, 4.0)
    assert s.std == pytest.approx(math.sqrt(60 / 9))
    assert s.cv == pytest.approx(s.std / 5.0)


def test_summarize_refuses_no_samples_and_has_no_cv_for_a_zero_mean() -> None:
    with pytest.raises(ValueError):
        summarize([])
    assert summarize([0.0, 0.0]).cv is None


# -- median_ci ---------------------------------------------------------------------------------


def test_interval_brackets_the_true_median_in_most_seeded_trials() -> None:
    """40 data sets with round-to-round drift around a true median of 1.0: the nominal
    95% interval contains 1.0 in at least 85% of them, and its width is sane (it is not
    covering by being enormous)."""
    hits, widths = 0, []
    for trial in range(40):
        data = rounds_of(np.random.default_rng(1000 + trial), between=0.05, within=0.1)
        ci = median_ci(data, resamples=1000)
        hits += ci.contains(1.0)
        widths.append(ci.width)
    assert hits >= 34, f"{hits}/40 intervals contained the true median"
    assert 0.01 < float(np.median(widths)) < 0.3


def test_interval_brackets_the_median_of_a_skewed_distribution() -> None:
    """Timings are right-skewed: exponential samples (true median ln 2) in rounds."""
    hits = 0
    for trial in range(40):
        rng = np.random.default_rng(2000 + trial)
        data = {("run", i): rng.exponential(1.0, 15).tolist() for i in range(10)}
        hits += median_ci(data, resamples=1000).contains(math.log(2))
    assert hits >= 34, f"{hits}/40 intervals contained ln 2"


def test_interval_widens_when_rounds_disagree() -> None:
    """Same samples within rounds; rounds shifted against each other make the interval
    several times wider than rounds that agree (the between-round level is resampled,
    not treated as independent samples)."""
    agree = rounds_of(np.random.default_rng(7), between=0.0, within=0.05)
    disagree = rounds_of(np.random.default_rng(7), between=0.2, within=0.05)
    narrow, wide = median_ci(agree), median_ci(disagree)
    assert wide.width > 3 * narrow.width
    # the 150 samples taken as independent would give a width of about 0.08 (1.25 x 0.21 /
    # sqrt(150) standard error); the rounds' own spread (0.2 / sqrt(10)) must show
    assert wide.width > 0.1


def test_interval_is_deterministic_and_the_seed_is_honoured() -> None:
    data = rounds_of(np.random.default_rng(3), between=0.05)
    assert median_ci(data) == median_ci(dict(reversed(list(data.items()))))
    assert median_ci(data, seed=1) != median_ci(data, seed=2)


def test_interval_counts_runs_and_rounds_and_drops_empty_rounds() -> None:
    """Groups key (run, round); empty rounds carry no information and are not counted."""
    rng = np.random.default_rng(4)
    data = {**rounds_of(rng, rounds=4, run="a"), **rounds_of(rng, rounds=3, run="b"),
            ("b", 99): []}
    ci = median_ci(data, confidence=0.9)
    assert (ci.runs, ci.rounds, ci.confidence) == (2, 7, 0.9)
    assert ci.low <= float(np.median(pooled(data))) <= ci.high
    with pytest.raises(ValueError):
        median_ci({})
    with pytest.raises(ValueError):
        median_ci({("a", 0): []})


def test_interval_resamples_whole_runs() -> None:
    """Three runs that disagree (1.0, 1.15 and 1.3 ms) give an interval spanning most of
    the gap: the run level varies and is resampled; three runs that agree do not."""
    rng = np.random.default_rng(5)
    apart = {k: v for run, c in (("a", 1.0), ("b", 1.15), ("c", 1.3))
             for k, v in rounds_of(rng, run=run, center=c, within=0.02).items()}
    together = {k: v for run in "abc"
                for k, v in rounds_of(rng, run=run, center=1.0, within=0.02).items()}
    wide, narrow = median_ci(apart), median_ci(together)
    assert (wide.runs, wide.rounds) == (3, 30)
    assert wide.low < 1.05 and wide.high > 1.25
    assert narrow.width < 0.05


@pytest.mark.parametrize("runs", [1, 2, 4])
def test_each_resample_median_is_the_median_of_the_rounds_it_drew(runs: int) -> None:
    """The resamples are kept as counts of rounds and their medians taken as weighted
    medians of the samples sorted once; each must equal the plain median of the samples of
    the rounds drawn, repeats included, for rounds of unequal size, odd and even totals."""
    rng = np.random.default_rng(11)
    data = {(f"r{r}", i): rng.normal(1.0, 0.1, int(rng.integers(1, 9))).tolist()
            for r in range(runs) for i in range(3 + r)}
    nested = _Nested(data)
    counts = nested.picks(np.random.default_rng(0), 200)
    rows = [samples for _, samples in sorted(data.items())]
    expected = [float(np.median([s for row, c in zip(rows, drawn, strict=True)
                                 for s in row * int(c)])) for drawn in counts]
    assert counts.shape == (200, len(rows))
    assert np.allclose(nested.medians(counts), expected, rtol=0, atol=1e-15)
    if runs >= 3:  # runs drawn first: a resample holds as many rounds as the runs it drew
        sizes = [3 + r for r in range(runs)]
        totals = {sum(c) for c in itertools.combinations_with_replacement(sizes, runs)}
        assert set(counts.sum(axis=1).tolist()) <= totals
        assert len(set(counts.sum(axis=1).tolist())) > 1


def test_interval_helpers() -> None:
    ci = Interval(0.9, 1.1)
    assert ci.width == pytest.approx(0.2)
    assert ci.relative_width(1.0) == pytest.approx(0.2)
    assert ci.relative_width(0.0) == float("inf")
    assert ci.contains(0.9) and ci.contains(1.1) and not ci.contains(1.2)


def test_pooled_flattens_groups_in_key_order() -> None:
    assert pooled({("b", 0): [3.0], ("a", 1): [2.0], ("a", 0): [1.0, 1.5]}) == \
        [1.0, 1.5, 2.0, 3.0]


# -- compare -----------------------------------------------------------------------------------


def drifting_pair(seed: int, ratio: float, *, rounds: int = 12, per_round: int = 15,
                  drift: float = 0.3, within: float = 0.01) -> tuple[Groups, Groups]:
    """Two subjects timed in the same rounds; a per-round drift (a placement change, say)
    scales both alike; b is `ratio` times a."""
    rng = np.random.default_rng(seed)
    scale = 1.0 + rng.uniform(0.0, drift, rounds)
    a = {("run", i): (scale[i] * (1.0 + rng.normal(0, within, per_round))).tolist()
         for i in range(rounds)}
    b = {("run", i): (ratio * scale[i] * (1.0 + rng.normal(0, within, per_round))).tolist()
         for i in range(rounds)}
    return a, b


def test_pairing_by_round_cancels_a_drift_both_subjects_share() -> None:
    """The same data compared paired (shared round keys) and unpaired (b under another run
    id): pairing gives a ratio interval many times narrower, around the true 1.05."""
    a, b = drifting_pair(11, 1.05)
    paired = compare(a, b)
    unpaired = compare(a, {("other", i): v for (_, i), v in b.items()})
    assert paired.paired and not unpaired.paired
    assert (paired.high - paired.low) * 4 < unpaired.high - unpaired.low
    assert paired.low < 1.05 < paired.high
    assert paired.verdict == "a_faster"  # b is 5% slower, decided only when paired
    assert unpaired.verdict == "tie"


def test_paired_comparison_uses_only_the_shared_rounds() -> None:
    """Rounds only one side has are left out of a paired comparison: b's extra rounds at
    10x would otherwise move the ratio."""
    a, b = drifting_pair(12, 1.0, drift=0.0)
    b_extra = {**b, **{("run", 100 + i): [10.0] * 15 for i in range(5)}}
    c = compare(a, b_extra)
    assert c.paired and c.ratio == pytest.approx(1.0, abs=0.01)
    assert c.verdict == "tie"


def test_a_ten_percent_difference_with_tight_samples_is_decided() -> None:
    rng = np.random.default_rng(13)
    a = rounds_of(rng, center=1.0, within=0.01, run="a")
    b = rounds_of(rng, center=1.1, within=0.01, run="b")
    slower = compare(a, b)
    assert slower.verdict == "a_faster" and slower.decided and slower.low > 1.0
    assert slower.ratio == pytest.approx(1.1, rel=0.01)
    faster = compare(b, a)
    assert faster.verdict == "b_faster" and faster.high < 1.0
    assert faster.describe("x", "y").startswith("y faster than x: 0.91x")


def test_a_half_percent_difference_in_noisy_samples_is_a_tie() -> None:
    rng = np.random.default_rng(14)
    a = rounds_of(rng, center=1.0, between=0.05, within=0.2, run="a")
    b = rounds_of(rng, center=1.005, between=0.05, within=0.2, run="b")
    c = compare(a, b)
    assert c.verdict == "tie" and not c.decided
    assert c.low < 1.0 < c.high


def test_compare_is_deterministic() -> None:
    a, b = drifting_pair(15, 1.02)
    assert compare(a, b) == compare(a, b)


def test_compare_refuses_empty_sides() -> None:
    a, _ = drifting_pair(16, 1.0)
    with pytest.raises(ValueError):
        compare({}, a)
    with pytest.raises(ValueError):
        compare(a, {})
    with pytest.raises(ValueError):
        compare({("run", 0): []}, {("run", 0): []})


def test_pairing_survives_a_round_empty_on_one_side() -> None:
    """Each shared round has b = 1.1 x a exactly, so a correct pairing gives the ratio
    1.1 in every resample. A round that is empty in a (a chunk that returned no samples)
    must be left out on both sides, not shift a's rounds against b's. (A regression test:
    an earlier version paired rounds by position after dropping empty ones per side.)"""
    a: Groups = {("run", 0): [], ("run", 1): [1.0] * 5, ("run", 2): [2.0] * 5}
    b: Groups = {("run", 0): [10.0] * 5, ("run", 1): [1.1] * 5, ("run", 2): [2.2] * 5}
    c = compare(a, b)
    assert c.low == pytest.approx(1.1) and c.high == pytest.approx(1.1)


def test_describe_says_the_verdict() -> None:
    assert Comparison(1.2, 1.1, 1.3, "a_faster").describe("x", "y") == \
        "x faster than y: 1.20x [1.10, 1.30]"
    assert "tie within noise: 1.00x [0.95, 1.05]" in \
        Comparison(1.0, 0.95, 1.05, "tie").describe()
    odd = Comparison(None, None, None, "incomparable", placement="near")
    assert "not comparable" in odd.describe() and not odd.decided


def test_log_ratio_is_symmetric() -> None:
    assert log_ratio(1.0, 1.1) == pytest.approx(log_ratio(1.1, 1.0))
    assert log_ratio(2.0, 2.0) == 0.0
    assert log_ratio(1.0, math.e) == pytest.approx(1.0)


def test_one_round_decides_nothing() -> None:
    """The bootstrap resamples whole rounds, so one round gives an interval of no width: a
    3.4x gap read from one shared round (a disturbed pass, both rows far) is a tie, and
    one shared round pairs nothing (each side's other rounds are used)."""
    one_a: Groups = {("run", 0): [6.5, 6.6, 6.4]}
    one_b: Groups = {("run", 0): [1.9, 1.9, 2.0]}
    c = compare(one_a, one_b)
    assert c.verdict == "tie" and not c.decided and c.ratio == pytest.approx(1.9 / 6.5)
    # one shared round, more of their own: unpaired over all of each side's rounds
    a: Groups = {("run", 0): [1.0] * 5, ("a", 1): [1.01] * 5, ("a", 2): [0.99] * 5}
    b: Groups = {("run", 0): [2.0] * 5, ("b", 1): [2.02] * 5, ("b", 2): [1.98] * 5}
    c = compare(a, b)
    assert not c.paired and c.verdict == "a_faster" and c.low < c.high
    # two shared rounds pair
    assert compare({**a, ("run", 1): [1.0] * 5}, {**b, ("run", 1): [2.0] * 5}).paired
    # a side with one round ties however far the other's rounds lie
    assert compare(one_a, b).verdict == "tie"
