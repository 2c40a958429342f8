"""The one place dlas turns timing samples into numbers: median, spread, confidence
intervals and the verdict of a comparison. The console, `dlas results`, the report and its
observation rules all read what this module computes, so they cannot disagree.

Why a hierarchical bootstrap: samples taken back to back are not independent. What
varies between chunks of samples (the vCPUs' placement, the frequency, what the cache
holds) and between whole timing runs moves many samples at once, so a CI built from the
samples of one run as if they were independent is far too narrow (Kalibera & Jones,
"Rigorous benchmarking in reasonable time", ISMM 2013: repeat at every level that varies
and build the interval over those levels). Samples are therefore kept in groups, one per
round of the interleaved sampler (`dlas.measure.rounds`), tagged with their timing run;
the bootstrap resamples runs, then rounds within a run, then samples within a round.

Comparisons of two variants timed in the same rounds are paired by round: both resample
the same rounds, so a drift that hits a round hits both sides of the ratio (the point of
interleaving, Abedi & Brecht, ICPE 2017). "A is faster than B" holds only when the
confidence interval of the ratio B/A lies wholly above 1; an interval that contains 1 is
a tie within noise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: Confidence level of every interval dlas reports.
CONFIDENCE = 0.95
#: Bootstrap resamples: enough for a stable 95% interval at milliseconds of cost.
RESAMPLES = 2000
#: Fixed seed: the same samples always give the same interval.
SEED = 0

#: A group of samples: (timing run id, round index) -> samples in ms.
GroupKey = tuple[str, int]


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of a set of samples (ms)."""

    n: int
    median: float
    mean: float
    std: float
    min: float
    max: float
    q1: float
    q3: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def cv(self) -> float | None:
        """Coefficient of variation (std / mean); None for a zero mean."""
        return self.std / self.mean if self.mean > 0 else None


def summarize(samples: Iterable[float]) -> Summary:
    """Median, mean, spread and quartiles of `samples` (at least one)."""
    arr = np.asarray(list(samples), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no samples to summarize")
    q1, med, q3 = np.percentile(arr, [25, 50, 75])
    return Summary(n=int(arr.size), median=float(med), mean=float(arr.mean()),
                   std=float(arr.std()), min=float(arr.min()), max=float(arr.max()),
                   q1=float(q1), q3=float(q3))


@dataclass(frozen=True)
class Interval:
    """A confidence interval and how it was built."""

    low: float
    high: float
    confidence: float = CONFIDENCE
    #: How many timing runs and rounds it resampled.
    runs: int = 1
    rounds: int = 1

    @property
    def width(self) -> float:
        return self.high - self.low

    def relative_width(self, center: float) -> float:
        """Width as a fraction of `center` (the median it belongs to)."""
        return self.width / center if center > 0 else float("inf")

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def _nest(groups: Mapping[GroupKey, Sequence[float]]) -> list[list[np.ndarray]]:
    """Groups as runs -> rounds -> samples, empty rounds dropped."""
    runs: dict[str, list[np.ndarray]] = {}
    for (run, _), samples in sorted(groups.items()):
        if len(samples):
            runs.setdefault(run, []).append(np.asarray(samples, dtype=np.float64))
    return [rounds for rounds in runs.values() if rounds]


def _resample_pooled(nested: list[list[np.ndarray]], rng: np.random.Generator,
                     picks: list[tuple[int, list[int]]] | None = None
                     ) -> tuple[np.ndarray, list[tuple[int, list[int]]]]:
    """One hierarchical resample: runs, rounds within each, samples within each round.
    `picks` (runs and rounds chosen) can be given to pair two resamples by round."""
    if picks is None:
        picks = []
        for run_i in rng.integers(0, len(nested), len(nested)):
            rounds = nested[int(run_i)]
            picks.append((int(run_i), [int(r) for r in rng.integers(0, len(rounds),
                                                                   len(rounds))]))
    parts = []
    for run_i, round_ids in picks:
        for r in round_ids:
            samples = nested[run_i][r]
            parts.append(samples[rng.integers(0, samples.size, samples.size)])
    return np.concatenate(parts), picks


def median_ci(groups: Mapping[GroupKey, Sequence[float]], *, confidence: float = CONFIDENCE,
              resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Percentile-bootstrap interval of the pooled median of grouped samples."""
    nested = _nest(groups)
    if not nested:
        raise ValueError("no samples for a confidence interval")
    rng = np.random.default_rng(seed)
    medians = np.empty(resamples)
    for i in range(resamples):
        pooled, _ = _resample_pooled(nested, rng)
        medians[i] = np.median(pooled)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(float(low), float(high), confidence, runs=len(nested),
                    rounds=sum(len(r) for r in nested))


def pooled(groups: Mapping[GroupKey, Sequence[float]]) -> list[float]:
    """Every sample of every group, in group order."""
    return [float(s) for _, samples in sorted(groups.items()) for s in samples]


@dataclass(frozen=True)
class Comparison:
    """How much slower `b` is than `a`: ratio = median(b) / median(a), with its interval.

    `verdict` is "a_faster", "b_faster" or "tie" (the interval contains 1), or
    "incomparable" when the two were timed in different vCPU placements
    (`dlas.measure.placement`) and no common one exists.
    """

    ratio: float | None
    low: float | None
    high: float | None
    verdict: str
    paired: bool = False
    placement: str | None = None

    @property
    def decided(self) -> bool:
        return self.verdict in ("a_faster", "b_faster")

    def describe(self, a: str = "A", b: str = "B") -> str:
        if self.verdict == "incomparable":
            return f"{a} vs {b}: not comparable (timed in different vCPU placements)"
        span = f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"
        if self.verdict == "a_faster":
            return f"{a} faster than {b}: {span}"
        if self.verdict == "b_faster":
            return f"{b} faster than {a}: {span}"
        return f"{a} and {b} tie within noise: {span}"


def compare(a: Mapping[GroupKey, Sequence[float]], b: Mapping[GroupKey, Sequence[float]], *,
            confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
            seed: int = SEED, placement: str | None = None) -> Comparison:
    """Bootstrap interval of median(b) / median(a).

    Paired when the two share rounds (the same timing run interleaved them): then only
    the shared rounds are used, resampled together. Otherwise each side is resampled on
    its own.
    """
    shared = sorted(set(a) & set(b))
    paired = bool(shared)
    if paired:
        a = {k: a[k] for k in shared}
        b = {k: b[k] for k in shared}
    na, nb = _nest(a), _nest(b)
    if not na or not nb:
        raise ValueError("both sides need samples to be compared")
    ratio = float(np.median(pooled(b)) / np.median(pooled(a)))
    rng = np.random.default_rng(seed)
    ratios = np.empty(resamples)
    for i in range(resamples):
        pa, picks = _resample_pooled(na, rng)
        pb, _ = _resample_pooled(nb, rng, picks if paired else None)
        ratios[i] = np.median(pb) / np.median(pa)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(ratios, [alpha, 1.0 - alpha]))
    verdict = "a_faster" if low > 1.0 else "b_faster" if high < 1.0 else "tie"
    return Comparison(ratio, low, high, verdict, paired, placement)


def log_ratio(a: float, b: float) -> float:
    """|ln(b / a)|: the symmetric relative difference of two timings (0.03 ~ 3%)."""
    return abs(float(np.log(b / a)))
