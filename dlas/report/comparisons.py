"""'A is faster than B', decided with confidence: the report's one way to compare two
timed points (`dlas.results.statistics.compare` over their timing histories).

- Only within one vCPU placement (`dlas.measure.placement.comparable`): the preferred
  placement both points have at least two undisturbed rounds in (one round gives no
  interval: `statistics.MIN_DECIDING_ROUNDS`), else the preferred one they share. A pair
  with none in common is "incomparable", which counts as a tie.
- Paired by round when the two were timed in the same rounds (the variants of one model,
  interleaved by the timing worker), so a drift that hit a round hits both.
- Across runs, wider: two points not timed in the same rounds (other timing workers: other
  models, other passes, other invocations) differ also by how far the machine drifted
  between their runs, so their ratio's interval gains both runtimes' drift on this machine
  (`dlas.results.drift`), and a verdict between rows of different invocations never rests
  on the narrower within-run intervals alone.
- A tie is a verdict, not a failure: "faster" holds only when the ratio's 95% interval
  excludes 1.
- Rows written before timing histories existed have no rounds: they compare by their
  stored intervals (faster only when the intervals separate), or, with no interval at
  all, by their medians (said so in `Comparison.placement`: "medians only").

A statistic computed from timings (a speedup, a share of the expected speedup, their mean
or geometric mean over cases) is compared with a threshold the same way: as an
`Statistic`, decided only when the whole interval lies on one side (`at_least`, `above`);
one that straddles the threshold is a tie. The intervals are propagated simply and
conservatively:

- a speedup (the ratio of two points' medians): the ratio's interval from
  `compare_points` (a paired bootstrap over rounds when both points have timing
  histories; else the ratio of their intervals' ends, lo_b/hi_a to hi_b/lo_a; else the
  medians alone); an incomparable pair (no common vCPU placement) gets [0, inf];
- a constant multiple (a share of the ideal speedup: 100 x speedup / ratio): scaled;
- a mean or geometric mean over cases: the mean of the cases' low ends to the mean of
  their high ends (as if every case erred the same way at once);
- a ratio or difference of two statistics: from the opposite ends of the two intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from dlas.measure.placement import PREFERENCE, SINGLE, comparable
from dlas.report.data import ReportPoint
from dlas.results.drift import pair_half_width, prior, widen
from dlas.results.latency import groups, usable_runs
from dlas.results.statistics import (
    MIN_DECIDING_ROUNDS,
    Comparison,
    GroupKey,
    compare,
    pooled,
)

#: Resamples per comparison (the report makes hundreds; 1000 gives a stable 95% interval).
RESAMPLES = 1000


def _groups(p: ReportPoint, placement: str) -> dict[GroupKey, list[float]]:
    runs, loaded = usable_runs(p.runs)
    return groups(runs, placement, allow_loaded=loaded)


def _placements(p: ReportPoint) -> dict[str, int]:
    """The placements `p` has undisturbed rounds in, preferred first, with their rounds."""
    counts = {s: len(_groups(p, s)) for s in PREFERENCE}
    return {s: n for s, n in counts.items() if n}


def _first(rounds: dict[str, int]) -> str | None:
    """The preferred placement with enough rounds to decide (`MIN_DECIDING_ROUNDS`), else
    the preferred one."""
    enough = [s for s, n in rounds.items() if n >= MIN_DECIDING_ROUNDS]
    return (enough or list(rounds) or [None])[0]


def common_placement(pa: dict[str, int], pb: dict[str, int]) -> tuple[str, str] | None:
    """The placements to compare two points in (each maps its placements, preferred first,
    to its rounds there): the preferred one where both have enough rounds to decide, else
    the preferred one both have; a point timed on one CPU compares with the other's
    preferred placement."""
    if SINGLE in pa or SINGLE in pb:
        sa = SINGLE if SINGLE in pa else _first(pa)
        sb = SINGLE if SINGLE in pb else _first(pb)
        return (sa, sb) if sa and sb and comparable(sa, sb) else None
    both = {s: min(pa[s], pb[s]) for s in PREFERENCE if s in pa and s in pb}
    pick = _first(both)
    return (pick, pick) if pick else None


_latency_cache: dict[tuple[str, float, str], float | None] = {}


def latency_in(p: ReportPoint, placement: str) -> float | None:
    """`p`'s median over its undisturbed rounds in `placement` (its single-CPU rounds,
    which compare with any); None where it has none."""
    key = (p.key, p.updated_at, placement)
    if key not in _latency_cache:
        _latency_cache[key] = _latency_in(p, placement)
    return _latency_cache[key]


def _latency_in(p: ReportPoint, placement: str) -> float | None:
    for state in (placement, SINGLE):
        samples = pooled(_groups(p, state))
        if samples:
            return float(np.median(samples))
    return None


def ranked(points: Iterable[ReportPoint]) -> list[tuple[ReportPoint, float]]:
    """`points` that can be ranked against each other, each with the median it is ranked
    by: with timing histories, their medians in the preferred placement the most of them
    have rounds in (a point timed only elsewhere cannot be ranked against them and is left
    out); without (older rows), their headline medians."""
    points = [p for p in points if p.latency_ms is not None]
    if not any(p.runs for p in points):
        return [(p, p.latency_ms) for p in points if p.latency_ms is not None]
    counts = {s: sum(1 for p in points if latency_in(p, s) is not None) for s in PREFERENCE}
    best = max(PREFERENCE, key=lambda s: (counts[s], -PREFERENCE.index(s)))
    if counts[best] == 0:  # no undisturbed rounds anywhere: the headlines are all there is
        return [(p, p.latency_ms) for p in points if p.latency_ms is not None]
    out = []
    for p in points:
        value = latency_in(p, best) if p.runs else p.latency_ms
        if value is not None:
            out.append((p, value))
    return out


_cache: dict[tuple[str, float, str, float], Comparison] = {}


def compare_points(a: ReportPoint, b: ReportPoint) -> Comparison:
    """median(b) / median(a) with its interval and verdict (see the module doc)."""
    key = (a.key, a.updated_at, b.key, b.updated_at)
    if key not in _cache:
        _cache[key] = across_runs(_compare(a, b), a, b)
    return _cache[key]


def drift_of(p: ReportPoint) -> float:
    """The point's runtime's drift (|log ratio|) as its row recorded it (the prior for
    rows older than the record)."""
    return prior(p.runtime).half_width if p.next_run_drift is None else p.next_run_drift


def across_runs(c: Comparison, a: ReportPoint, b: ReportPoint) -> Comparison:
    """`c` with both points' drift added to its interval when they were not timed in
    the same rounds (see the module doc); paired and incomparable ones as they are."""
    if c.paired or c.ratio is None or c.low is None or c.high is None:
        return c
    low, high = widen(c.ratio, c.low, c.high, pair_half_width(drift_of(a), drift_of(b)))
    verdict = "a_faster" if low > 1.0 else "b_faster" if high < 1.0 else "tie"
    where = f"{c.placement}, across runs" if c.placement else "across runs"
    return replace(c, low=low, high=high, verdict=verdict, placement=where)


def _compare(a: ReportPoint, b: ReportPoint) -> Comparison:
    if a.latency_ms is None or b.latency_ms is None:
        raise ValueError("both points need a timing to be compared")
    if a.runs and b.runs:
        pick = common_placement(_placements(a), _placements(b))
        if pick is None:
            return Comparison(b.latency_ms / a.latency_ms, None, None, "incomparable")
        sa, sb = pick
        return compare(_groups(a, sa), _groups(b, sb), resamples=RESAMPLES,
                       placement=sa if sa == sb else f"{sa}/{sb}")
    ratio = b.latency_ms / a.latency_ms
    lo_a, hi_a = a.latency_ci_low_ms, a.latency_ci_high_ms
    lo_b, hi_b = b.latency_ci_low_ms, b.latency_ci_high_ms
    if None not in (lo_a, hi_a, lo_b, hi_b):
        assert lo_a is not None and hi_a is not None and lo_b is not None and hi_b is not None
        low, high = lo_b / hi_a, hi_b / lo_a
        verdict = "a_faster" if lo_b > hi_a else "b_faster" if hi_b < lo_a else "tie"
        return Comparison(ratio, low, high, verdict, False, "intervals only")
    verdict = "a_faster" if ratio > 1 else "b_faster" if ratio < 1 else "tie"
    return Comparison(ratio, ratio, ratio, verdict, False, "medians only")


def faster(a: ReportPoint, b: ReportPoint) -> bool | None:
    """True when `a` is decidedly faster than `b`, False when decidedly slower, None for
    a tie within noise (or an incomparable pair)."""
    c = compare_points(a, b)
    return True if c.verdict == "a_faster" else False if c.verdict == "b_faster" else None


def decided_fastest(candidates: Iterable[ReportPoint]
                    ) -> tuple[ReportPoint | None, list[ReportPoint]]:
    """(The fastest point, the others it ties with). The fastest by median is compared
    with each other candidate; those it is not decidedly faster than tie with it."""
    points = [p for p in candidates if p.latency_ms is not None]
    if not points:
        return None, []
    best = min(points, key=lambda p: (p.latency_ms, p.compression, p.algorithm))
    ties = [p for p in points if p is not best and faster(best, p) is not True]
    return best, ties


def ties_line(compared: int, ties: int) -> str:
    """How many of an observation's comparisons were ties (said by every rule)."""
    return (f"{ties} of {compared} comparison(s) were ties within noise (95% intervals; "
            "a tie decides nothing)")


# -- statistics against thresholds -----------------------------------------------------------


@dataclass(frozen=True)
class Statistic:
    """A statistic (`value`, from the points' medians) with a conservative 95% interval
    (`low` <= value <= high; ends may be 0 or inf where nothing bounds them)."""

    value: float
    low: float
    high: float
    #: False when it divides timings with no vCPU placement in common: `value` is then
    #: the headline medians' ratio, which no claim may state (`text` says so instead).
    comparable: bool = True

    @classmethod
    def exact(cls, value: float) -> Statistic:
        return cls(value, value, value)

    def scaled(self, factor: float) -> Statistic:
        """A positive constant multiple (a speedup as a share of its ideal)."""
        return Statistic(self.value * factor, self.low * factor, self.high * factor,
                         self.comparable)

    def text(self, fmt: str = ".2f", unit: str = "") -> str:
        """'1.23x [1.10, 1.40]'; the value alone when the interval is a point; 'not
        comparable' for timings with no placement in common."""
        if not self.comparable:
            return "not comparable (no vCPU placement in common)"
        value = f"{self.value:{fmt}}{unit}"
        if self.low == self.high:
            return value
        return f"{value} [{self.low:{fmt}}, {self.high:{fmt}}]"


def speedup_interval(base: ReportPoint, other: ReportPoint) -> Statistic:
    """How many times faster `other` is than `base` (median(base) / median(other)) in
    the placement `compare_points` compares them in, with its interval; an incomparable
    pair is [0, inf] and marked so (its value, the headline medians' ratio, is not a
    claim)."""
    assert base.latency_ms is not None and other.latency_ms is not None
    c = compare_points(other, base)
    if c.verdict == "incomparable" or c.ratio is None:
        return Statistic(base.latency_ms / other.latency_ms, 0.0, math.inf, comparable=False)
    if c.low is None or c.high is None:
        return Statistic(c.ratio, 0.0, math.inf)
    return Statistic(c.ratio, min(c.low, c.ratio), max(c.high, c.ratio))


def _geo(values: list[float]) -> float:
    if any(v == 0 for v in values):
        return 0.0
    if any(math.isinf(v) for v in values):
        return math.inf
    return math.exp(sum(math.log(v) for v in values) / len(values))


def mean_interval(intervals: Iterable[Statistic]) -> Statistic:
    """Arithmetic mean over cases: mean of the low ends to mean of the high ends."""
    ivs = list(intervals)
    if not ivs:
        raise ValueError("mean of nothing")
    n = len(ivs)
    return Statistic(sum(i.value for i in ivs) / n, sum(i.low for i in ivs) / n,
                    sum(i.high for i in ivs) / n, all(i.comparable for i in ivs))


def geomean_interval(intervals: Iterable[Statistic]) -> Statistic:
    """Geometric mean over cases: geometric mean of the low ends to that of the highs."""
    ivs = list(intervals)
    if not ivs:
        raise ValueError("geomean of nothing")
    return Statistic(_geo([i.value for i in ivs]), _geo([i.low for i in ivs]),
                    _geo([i.high for i in ivs]), all(i.comparable for i in ivs))


def ratio_interval(x: Statistic, y: Statistic) -> Statistic:
    """x / y of two positive statistics, from opposite ends."""
    def div(a: float, b: float) -> float:
        return math.inf if b == 0 else a / b

    return Statistic(div(x.value, y.value), div(x.low, y.high), div(x.high, y.low),
                     x.comparable and y.comparable)


def difference_interval(x: Statistic, y: Statistic) -> Statistic:
    """x - y, from opposite ends."""
    return Statistic(x.value - y.value, x.low - y.high, x.high - y.low,
                     x.comparable and y.comparable)


def at_least(iv: Statistic, threshold: float) -> bool | None:
    """Whether the statistic is >= threshold: True when its whole interval is, False when
    its whole interval is below, None (a tie) when the interval straddles it."""
    if iv.low >= threshold:
        return True
    if iv.high < threshold:
        return False
    return None


def above(iv: Statistic, threshold: float) -> bool | None:
    """Whether the statistic is > threshold, decided as `at_least` is."""
    if iv.low > threshold:
        return True
    if iv.high <= threshold:
        return False
    return None
