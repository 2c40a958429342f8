"""The paper's expected-speedup analysis.

For each platform, tuning and model the paper takes the *best* dense time over all
algorithms, and for each compression its best time over all algorithms. The speedup is
their ratio; the *expected* (ideal) speedup is what the compression ratio promises (95%
pruning: 20x, float16: 2x, int8: 4x); the headline is the speedup as a percentage of that
ideal, and "on average" is the arithmetic mean of those percentages over the models of a
platform (Section 5.1.2: "On average, for weight pruning we achieve 11.5% and 21.8% of the
expected speedup on the HiKey and i7").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from dlas.report.comparisons import speedup_interval
from dlas.report.data import ReportPoint
from dlas.report.paper import Paper
from dlas.report.tables import (
    COMPRESSION_ORDER,
    Group,
    fastest_algorithm,
    ordered,
    speed_cells,
)


def percent_of_expected(achieved: float, ideal: float) -> float:
    """Achieved speedup as a percentage of the ideal one (can exceed 100, as int8 on the
    paper's i7 did: 157%)."""
    if ideal <= 1:
        raise ValueError(f"an ideal speedup must exceed 1, got {ideal}")
    return 100.0 * achieved / ideal


@dataclass(frozen=True)
class SpeedupCell:
    """One model's best compressed time against its best dense time."""

    group: Group
    model_label: str
    model: str
    compression: str
    dense: ReportPoint
    best: ReportPoint

    @property
    def ratio(self) -> float | None:
        return self.best.ratio

    @property
    def speedup(self) -> float | None:
        """Dense median over compressed median, both in the vCPU placement the two points
        compare in (`speedup_interval`); None when they share none."""
        assert self.dense.latency_ms is not None and self.best.latency_ms is not None
        stat = speedup_interval(self.dense, self.best)
        return stat.value if stat.comparable else None

    @property
    def speedup_text(self) -> str:
        """'2.19x', '1.02x (tie)' where the interval holds 1, or 'not comparable'."""
        stat = speedup_interval(self.dense, self.best)
        if not stat.comparable:
            return "not comparable"
        return f"{stat.value:.2f}x" + (" (tie)" if stat.low <= 1.0 <= stat.high else "")

    @property
    def pct_expected(self) -> float | None:
        if self.ratio is None or self.ratio <= 1 or self.speedup is None:
            return None
        return percent_of_expected(self.speedup, self.ratio)


def speedup_cells(points: Iterable[ReportPoint]) -> list[SpeedupCell]:
    out = []
    for group, models in speed_cells(points).items():
        for model_label, cells in models.items():
            dense = fastest_algorithm(cells, "none")
            if dense is None:
                continue
            for compression in ordered({c for c, _ in cells} - {"none"}, COMPRESSION_ORDER):
                best = fastest_algorithm(cells, compression)
                if best is not None:
                    out.append(SpeedupCell(group, model_label, dense.model, compression,
                                           dense, best))
    return out


@dataclass(frozen=True)
class SpeedupAverage:
    """A platform x tuning x compression average over models, as the paper reports it."""

    group: Group
    compression: str
    models: int
    mean_pct: float | None
    #: Over the models whose two points share a placement; None when none do.
    geomean_speedup: float | None
    paper_pct: float | None = None


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    if not values:
        raise ValueError("geomean of nothing")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def averages(cells: Iterable[SpeedupCell], paper: Paper | None = None,
             paper_platforms: dict[str, str] | None = None) -> list[SpeedupAverage]:
    grouped: dict[tuple[Group, str], list[SpeedupCell]] = defaultdict(list)
    for cell in cells:
        grouped[(cell.group, cell.compression)].append(cell)
    out = []
    for (group, compression), members in grouped.items():
        pcts = [c.pct_expected for c in members if c.pct_expected is not None]
        paper_pct = None
        if paper is not None and paper_platforms and group.target in paper_platforms:
            paper_pct = paper.expected_pct(group.dataset, paper_platforms[group.target],
                                           group.tuned, compression)
        speedups = [c.speedup for c in members if c.speedup is not None]
        out.append(SpeedupAverage(group, compression, len(members), mean(pcts),
                                  geomean(speedups) if speedups else None, paper_pct))
    return out
