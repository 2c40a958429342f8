"""What a row's figures cost to compute: `dlas.results.statistics.median_ci` against the
per-resample loop it replaced, on timing histories shaped like the quickstart's rows.

Every row a sweep finishes, every `dlas results` and every report builds bootstrap
intervals of pooled medians over rounds and runs (docs/timing.md). Until 2026-11-28 each
of the 2000 resamples was drawn and its median taken in a Python loop once a row had three
or more timing runs (every row after the quickstart's third pass): about a second per row
on a Zen 3, ~30 s of each timing pass. The peer here is that loop, kept in this file as the
reference. It prints, per shape, milliseconds per interval for both, the ratio, and how
far the two intervals' ends lie apart (both are bootstraps of the same distribution with
different draws, so they agree to within the bootstrap's own error, not exactly).

    python benchmarks/row_statistics.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence

import numpy as np

from dlas.results.statistics import CONFIDENCE, RESAMPLES, SEED, GroupKey, median_ci


def reference_interval(groups: Mapping[GroupKey, Sequence[float]]) -> tuple[float, float]:
    """The previous scheme with three or more runs: for each resample, the runs with
    replacement, then each chosen run's rounds with replacement, pooled, and the median of
    the pool."""
    runs: dict[str, list[np.ndarray]] = {}
    for (run, _), samples in sorted(groups.items()):
        if len(samples):
            runs.setdefault(run, []).append(np.asarray(samples, dtype=np.float64))
    per_run = list(runs.values())
    rng = np.random.default_rng(SEED)
    medians = []
    for _ in range(RESAMPLES):
        chosen = rng.integers(0, len(per_run), len(per_run))
        pool = [per_run[r][i] for r in chosen
                for i in rng.integers(0, len(per_run[r]), len(per_run[r]))]
        medians.append(np.median(np.concatenate(pool)))
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(low), float(high)


def history(rng: np.random.Generator, runs: int, rounds: int, per_round: int
            ) -> dict[GroupKey, list[float]]:
    """A row's timing history: `runs` timing runs of `rounds` rounds (one or two fewer in
    some, as placements drop rounds), each of about `per_round` samples around 2 ms with
    round-to-round and run-to-run shifts."""
    out: dict[GroupKey, list[float]] = {}
    for r in range(runs):
        shift = rng.normal(0.0, 0.03)
        for i in range(rounds - int(rng.integers(0, 3))):
            n = max(3, per_round + int(rng.integers(-per_round // 3, per_round // 3 + 1)))
            level = 2.0 * (1 + shift + rng.normal(0.0, 0.02))
            out[(f"run{r}", i)] = (level * (1 + rng.normal(0.0, 0.03, n))).tolist()
    return out


def timed(fn, repeat: int) -> float:  # noqa: ANN001 - any zero-argument callable
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'runs x rounds x samples':>24} {'dlas ms':>9} {'loop ms':>9} {'loop/dlas':>9} "
          f"{'ends apart':>10}")
    # three runs and more: where the previous code looped (with one or two it drew all
    # resamples at once already; the new code is 6x faster there, with the same draws)
    for runs, rounds, per_round in [(3, 4, 12), (3, 8, 20), (4, 10, 15), (5, 10, 20),
                                    (9, 10, 20)]:
        groups = history(rng, runs, rounds, per_round)
        ours = timed(lambda g=groups: median_ci(g), args.repeat)
        theirs = timed(lambda g=groups: reference_interval(g), max(1, args.repeat // 2))
        ci = median_ci(groups)
        low, high = reference_interval(groups)
        apart = max(abs(ci.low - low), abs(ci.high - high)) / float(np.median(
            [s for v in groups.values() for s in v]))
        print(f"{f'{runs} x {rounds} x {per_round}':>24} {ours:9.1f} {theirs:9.1f} "
              f"{theirs / ours:8.1f}x {apart:9.2%}")


if __name__ == "__main__":
    main()
