"""How far independent timing runs of the same artifact agree on this machine, per runtime.

Why this is measured and not assumed: a row's confidence interval resamples the rounds of
the runs it has, so it says how well those runs pin their own median down, not where a
new run would land. On the 2-vCPU VMs dlas runs on, the machine's state moves at the
scale of minutes, in ways no probe inside a run predicts (docs/timing.md: on Zen 5,
PyTorch eager read 2.3 ms for a minute and 3.2-3.5 ms for the next two, in fresh
processes alike, while compiled TVM code moved a few percent). The only honest answer
is to time again and look (Kalibera & Jones: repeat at the level that varies), which
`dlas run CONFIG --remeasure` does; this module turns the timing history it leaves into
the figure a reader needs: per runtime, how far two runs of one point differ.

Each run's own figure is the one `dlas.results.latency.latency_columns` computes from
that run alone, and two runs are compared only when their figures come from the same
vCPU placement (across placements they differ by design, up to 2x). The benchmark
(`benchmarks/measurement.py`) and the report read the same functions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from dlas.measure.record import TimingRun
from dlas.results.statistics import log_ratio

#: Runtime name of a TVM variant (baselines are named by their runtime).
TVM = "tvm"


@dataclass(frozen=True)
class RunFigure:
    """One timing run's own figure for one point."""

    run_id: str
    started_at: float
    placement: str
    median_ms: float


@dataclass(frozen=True)
class TimedPoint:
    """A point's timing history, as this module needs it."""

    label: str
    runtime: str
    runs: Sequence[TimingRun]
    #: The drift its row's next-run range was widened by (|log ratio|), if it has one.
    drift: float | None = None


@dataclass(frozen=True)
class RunAgreement:
    """How far runs of the same points agreed, for one runtime: |log ratio| of every
    two runs of a point timed in the same placement (0.05 is about 5%)."""

    runtime: str
    #: Points with at least two runs in one placement, and the pairs compared.
    points: int
    pairs: int
    median: float
    worst: float
    #: The point and the two figures (ms) of the worst pair.
    worst_point: str
    worst_ms: tuple[float, float]

    def describe(self) -> str:
        return (f"{self.runtime}: {pct(self.median)} median, {pct(self.worst)} worst over "
                f"{self.pairs} pairs of runs of {self.points} points (worst: "
                f"{self.worst_point}, {self.worst_ms[0]:.3g} vs {self.worst_ms[1]:.3g} ms)")


def pct(fraction: float) -> str:
    """|log ratio| as the percentage a reader expects (0.0953 -> '10.0%')."""
    return f"{100 * math.expm1(fraction):.1f}%"


def run_figures(runs: Iterable[TimingRun]) -> list[RunFigure]:
    """Each run's own figure, oldest first (runs without samples are skipped)."""
    from dlas.results.latency import latency_columns

    out = []
    for run in sorted(runs, key=lambda r: r.started_at):
        if not any(r.samples_ms for r in run.rounds):
            continue
        cols = latency_columns([run], ci_threshold=math.inf)
        out.append(RunFigure(run.run_id, run.started_at, str(cols["placement"]),
                             float(cols["latency_median_ms"])))
    return out


def pair_log_ratios(figures: Sequence[RunFigure]) -> list[tuple[float, RunFigure, RunFigure]]:
    """|log ratio| of every two figures taken in the same placement."""
    return [(log_ratio(a.median_ms, b.median_ms), a, b)
            for a, b in itertools.combinations(figures, 2)
            if a.placement == b.placement and a.median_ms > 0 and b.median_ms > 0]


def run_agreement(points: Iterable[TimedPoint]) -> list[RunAgreement]:
    """Per runtime (TVM first, then baselines by name), how far runs agreed; runtimes
    with no point timed twice in one placement are left out."""
    by_runtime: dict[str, list[tuple[float, str, float, float]]] = {}
    counted: dict[str, set[str]] = {}
    for point in points:
        pairs = pair_log_ratios(run_figures(point.runs))
        if not pairs:
            continue
        counted.setdefault(point.runtime, set()).add(point.label)
        by_runtime.setdefault(point.runtime, []).extend(
            (lr, point.label, a.median_ms, b.median_ms) for lr, a, b in pairs)
    out = []
    for runtime in sorted(by_runtime, key=lambda r: (r != TVM, r)):
        values = by_runtime[runtime]
        worst = max(values, key=lambda v: v[0])
        out.append(RunAgreement(runtime, len(counted[runtime]), len(values),
                                float(np.median([v[0] for v in values])), worst[0],
                                worst[1], (worst[2], worst[3])))
    return out


@dataclass(frozen=True)
class RangeCoverage:
    """How often a run landed inside the next-run range of the run before it (same point,
    same placement; the range as the row computes it: the earlier run's median widened by
    the row's drift, `dlas.results.drift`), for one runtime."""

    runtime: str
    pairs: int
    inside: int
    #: The drift the ranges were widened by (the widest of the runtime's rows).
    drift: float

    @property
    def share(self) -> float:
        return self.inside / self.pairs if self.pairs else math.nan


def range_coverage(points: Iterable[TimedPoint]) -> list[RangeCoverage]:
    """Per runtime, over consecutive runs of each point in one placement: the share of
    later runs inside the earlier run's next-run range."""
    tally: dict[str, list[int]] = {}
    widths: dict[str, float] = {}
    for point in points:
        if point.drift is None:
            continue
        last: dict[str, float] = {}
        for fig in run_figures(point.runs):
            before = last.get(fig.placement)
            if before is not None:
                counts = tally.setdefault(point.runtime, [0, 0])
                counts[0] += 1
                counts[1] += log_ratio(before, fig.median_ms) <= point.drift
            last[fig.placement] = fig.median_ms
        widths[point.runtime] = max(widths.get(point.runtime, 0.0), point.drift)
    return [RangeCoverage(rt, n, inside, widths[rt])
            for rt, (n, inside) in sorted(tally.items(), key=lambda kv: (kv[0] != TVM, kv[0]))]
