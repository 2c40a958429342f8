"""The one place dlas turns timing samples into numbers: median, spread, confidence
intervals and the verdict of a comparison. The console, `dlas results`, the report and its
observation rules all read what this module computes, so they cannot disagree.

Why a cluster bootstrap: samples taken back to back are not independent. What varies
between chunks of samples (the vCPUs' placement, the frequency, what the cache holds)
and between whole timing runs moves many samples at once, so a CI built from the samples
of one run as if they were independent is far too narrow (Kalibera & Jones, "Rigorous
benchmarking in reasonable time", ISMM 2013: repeat at every level that varies and build
the interval over those levels). Samples are therefore kept in groups, one per round of
the interleaved sampler (`dlas.measure.rounds`), tagged with their timing run. The
bootstrap resamples whole rounds (the variation inside a round is carried by the round
as it is), within each run; with three or more runs it resamples the runs too, so the
interval also covers how runs differ.

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

#: Rounds a side needs for a comparison to decide anything: the bootstrap resamples whole
#: rounds, so from one round every resample draws that round and the interval has no width
#: (a `dlas report` on a disturbed pass once said "differ: 0.289x [0.289, 0.289]" of two
#: rows that shared one round in far placement). With fewer, a comparison is not paired
#: (one shared round pairs nothing) and says tie.
MIN_DECIDING_ROUNDS = 2
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


class _Nested:
    """Grouped samples laid out for vectorised resampling.

    A resample is a multiset of rounds, so it is held as counts (how often each round was
    drawn), and its pooled median is a weighted median over the samples sorted once:
    each sample weighs its round's count. That gives exactly the median of the pooled
    resampled samples without building them, for every resample at once (the per-resample
    loop this replaced took about a second per row of a sweep on a Zen 3)."""

    def __init__(self, groups: Mapping[GroupKey, Sequence[float]]) -> None:
        runs: dict[str, list[np.ndarray]] = {}
        for (run, _), samples in sorted(groups.items()):
            if len(samples):
                runs.setdefault(run, []).append(np.asarray(samples, dtype=np.float64))
        self.run_sizes = np.array([len(rounds) for rounds in runs.values()], dtype=np.int64)
        rows = [r for rounds in runs.values() for r in rounds]
        self.offsets = np.cumsum([0, *self.run_sizes[:-1]]).astype(np.int64)
        values = np.concatenate(rows) if rows else np.empty(0)
        round_of = np.repeat(np.arange(len(rows)), [r.size for r in rows])
        order = np.argsort(values, kind="stable")
        self.sorted_values = values[order]
        self.sorted_rounds = round_of[order]
        self.round_count = len(rows)

    @property
    def runs(self) -> int:
        return len(self.run_sizes)

    @property
    def rounds(self) -> int:
        return self.round_count

    def picks(self, rng: np.random.Generator, resamples: int) -> np.ndarray:
        """How often each resample drew each round, (resamples, rounds): rounds with
        replacement within each run; with three or more runs, the runs with replacement
        first, then the rounds of each run drawn."""
        if self.runs < 3:
            drawn = np.concatenate(
                [rng.integers(0, n, size=(resamples, n)) + off
                 for n, off in zip(self.run_sizes, self.offsets, strict=True)], axis=1)
            flat = (np.arange(resamples)[:, None] * self.rounds + drawn).ravel()
        else:
            chosen = rng.integers(0, self.runs, size=(resamples, self.runs))
            sizes = self.run_sizes[chosen][..., None]
            widest = int(self.run_sizes.max())
            drawn = (rng.integers(0, np.broadcast_to(sizes, (*chosen.shape, widest)))
                     + self.offsets[chosen][..., None])
            # each chosen run fills only its own size of the `widest` slots
            valid = np.broadcast_to(np.arange(widest) < sizes, drawn.shape)
            flat = (np.arange(resamples)[:, None, None] * self.rounds + drawn)[valid]
        return np.bincount(flat, minlength=resamples * self.rounds).reshape(
            resamples, self.rounds)

    def medians(self, counts: np.ndarray) -> np.ndarray:
        """The pooled median of each resample (a row of `picks`' counts)."""
        weights = np.cumsum(counts[:, self.sorted_rounds], axis=1)
        total = weights[:, -1]
        # rows laid end to end, each lifted above the last, so one search finds every
        # row's sample of a given rank: the first whose running weight exceeds it
        lift = (np.arange(len(counts), dtype=np.int64) * (int(total.max()) + 1))[:, None]
        flat = (weights + lift).ravel()
        base = lift[:, 0]
        n = weights.shape[1]

        def at_rank(rank: np.ndarray) -> np.ndarray:
            pos = np.searchsorted(flat, base + rank, side="right") - np.arange(len(counts)) * n
            return self.sorted_values[pos]

        return (at_rank((total - 1) // 2) + at_rank(total // 2)) / 2.0


def median_ci(groups: Mapping[GroupKey, Sequence[float]], *, confidence: float = CONFIDENCE,
              resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """Percentile-bootstrap interval of the pooled median of grouped samples."""
    nested = _Nested(groups)
    if nested.rounds == 0:
        raise ValueError("no samples for a confidence interval")
    rng = np.random.default_rng(seed)
    medians = nested.medians(nested.picks(rng, resamples))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return Interval(float(low), float(high), confidence, runs=nested.runs,
                    rounds=nested.rounds)


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

    Paired when the two share `MIN_DECIDING_ROUNDS` rounds or more (the same timing run
    interleaved them): then only the shared rounds are used, resampled together.
    Otherwise each side is resampled on its own. A side with fewer than
    `MIN_DECIDING_ROUNDS` rounds has no spread between rounds to resample: the verdict is
    a tie, whatever the ratio.
    """
    shared = [k for k in sorted(set(a) & set(b)) if len(a[k]) and len(b[k])]
    paired = len(shared) >= MIN_DECIDING_ROUNDS
    if paired:
        a = {k: a[k] for k in shared}
        b = {k: b[k] for k in shared}
    na, nb = _Nested(a), _Nested(b)
    if na.rounds == 0 or nb.rounds == 0:
        raise ValueError("both sides need samples to be compared")
    ratio = float(np.median(pooled(b)) / np.median(pooled(a)))
    rng = np.random.default_rng(seed)
    picks_a = na.picks(rng, resamples)
    picks_b = picks_a if paired else nb.picks(rng, resamples)
    ratios = nb.medians(picks_b) / na.medians(picks_a)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(q) for q in np.quantile(ratios, [alpha, 1.0 - alpha]))
    verdict = "a_faster" if low > 1.0 else "b_faster" if high < 1.0 else "tie"
    if min(na.rounds, nb.rounds) < MIN_DECIDING_ROUNDS:
        verdict = "tie"
    return Comparison(ratio, low, high, verdict, paired, placement)


def log_ratio(a: float, b: float) -> float:
    """|ln(b / a)|: the symmetric relative difference of two timings (0.03 ~ 3%)."""
    return abs(float(np.log(b / a)))
