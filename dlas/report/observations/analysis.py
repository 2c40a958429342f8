"""What the rules share: rank statistics, and the analysis of the points (the speed cells,
the speedup cells, the paper's dataset roles) computed once for all thirteen rules.

The speed cells (`dlas.report.tables`) hold each algorithm at its fastest activation
layout, so a rule that compares algorithms never sees two layouts of one algorithm as two
rivals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from dlas.report.comparisons import Statistic, speedup_interval
from dlas.report.data import ReportPoint
from dlas.report.observations.verdict import ComparedPair
from dlas.report.paper import Paper
from dlas.report.speedup import SpeedupCell, speedup_cells
from dlas.report.tables import (
    Cells,
    Group,
    accuracy_tables,
    fastest_algorithm,
    short,
    speed_cells,
)

# -- statistics --------------------------------------------------------------------------


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when undefined."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    if vx == 0 or vy == 0:
        return None
    return cov / (vx * vy) ** 0.5


def rho_line(name: str, rho: float | None, n: int) -> str:
    return f"{name}: Spearman rho = {rho:+.2f} over {n} models"


# -- the data the observations share -----------------------------------------------------


@dataclass
class Analysis:
    points: list[ReportPoint]
    cells: dict[Group, dict[str, Cells]]
    speedups: list[SpeedupCell]
    roles: dict[str, str]
    #: The paper the points are read against (its own figures, printed beside ours).
    paper: Paper | None = None

    @classmethod
    def of(cls, points: Iterable[ReportPoint], paper: Paper | None = None) -> Analysis:
        points = [p for p in points if p.is_result]
        roles = dict(paper.datasets) if paper else {}
        return cls(points, speed_cells(points), speedup_cells(points), roles, paper)

    def role(self, dataset: str) -> str:
        return self.roles.get(dataset, dataset)

    def model_facts(self) -> dict[str, list[tuple[str, int | None, int | None, float | None]]]:
        """Per dataset: (model label, params, MACs, dense top-1) of every model."""
        out: dict[str, list[tuple[str, int | None, int | None, float | None]]] = {}
        for table in accuracy_tables(self.points):
            out[table.dataset] = [(r.model_label, r.params, r.macs, r.top1) for r in table.rows]
        return out

    def best_dense(self) -> dict[Group, dict[str, ReportPoint]]:
        out: dict[Group, dict[str, ReportPoint]] = defaultdict(dict)
        for group, models in self.cells.items():
            for model, cells in models.items():
                best = fastest_algorithm(cells, "none")
                if best is not None:
                    out[group][model] = best
        return out


# -- a compressed model against its dense one (X and XII) --------------------------------


def pct_expected(c: SpeedupCell) -> Statistic:
    """A compressed model's % of its expected speedup, with the speedup's interval."""
    assert c.ratio is not None
    return speedup_interval(c.dense, c.best).scaled(100.0 / c.ratio)


def dense_vs_compressed(c: SpeedupCell) -> ComparedPair:
    return ComparedPair(f"{c.group.label} {c.model_label} {short(c.compression)}", c.dense,
                      c.best, "expected")
