"""Two rows' timings compared the only way dlas states a ratio: in one vCPU placement,
and as a tie where their intervals overlap.

Why: on these VMs the same kernel reads up to 2x apart depending on where the hypervisor
has put the two vCPUs (DESIGN.md, "Timing on these VMs"). A row's headline figures are
taken in its preferred placement with enough rounds, so two rows' headlines may come from
different placements: a TVM row timed near divided by an ONNX Runtime row timed far once
made the quickstart call TVM 1.48x faster where both rows near said 1.07x slower. Every row
also keeps its figures in each placement it was timed in (`ResultRow.latency_by_placement`),
so the pair can nearly always be read in one placement; where it cannot, the comparison says
so instead of giving a number.

The rule is the one `dlas.measure.placement.comparable` states: the same placement, or a
row timed on one CPU (`single`), which no placement affects. The report's observations
compare timing histories (`dlas.report.comparisons`, a paired bootstrap); this module is
for the places that hold only rows (the run's summary, benchmarks): "faster" only when the
two 95% intervals separate, and only when each rests on two rounds or more (one round's
interval has no width: `dlas.results.statistics.MIN_DECIDING_ROUNDS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dlas.measure.placement import PREFERENCE, SINGLE
from dlas.results.statistics import MIN_DECIDING_ROUNDS

if TYPE_CHECKING:
    from dlas.results.row import ResultRow

Verdict = Literal["a_faster", "b_faster", "tie", "incomparable"]


@dataclass(frozen=True)
class PlacedFigure:
    """A row's median and 95% interval in one placement."""

    placement: str | None
    median_ms: float
    ci_low_ms: float | None = None
    ci_high_ms: float | None = None
    #: Rounds behind the figures (None: not recorded, rows older than the record).
    rounds: int | None = None

    @property
    def decides(self) -> bool:
        """Whether its interval can decide a comparison: it rests on
        `MIN_DECIDING_ROUNDS` rounds or more (one round's interval has no width)."""
        return self.rounds is None or self.rounds >= MIN_DECIDING_ROUNDS


def placed_figures(row: ResultRow) -> dict[str | None, PlacedFigure]:
    """Every placement `row` has figures in: its per-placement record, and its headline
    (rows written before the record, or without a probe, have only the headline)."""
    out: dict[str | None, PlacedFigure] = {}
    for state, fig in (row.latency_by_placement or {}).items():
        if isinstance(fig, dict) and fig.get("median_ms"):
            rounds = fig.get("rounds")
            out[state] = PlacedFigure(state, float(fig["median_ms"]), fig.get("ci_low_ms"),
                                      fig.get("ci_high_ms"),
                                      int(rounds) if rounds is not None else None)
    if row.latency_median_ms and row.placement not in out:
        out[row.placement] = PlacedFigure(row.placement, row.latency_median_ms,
                                          row.latency_ci_low_ms, row.latency_ci_high_ms,
                                          row.timing_rounds)
    return out


def figure_in(row: ResultRow, placement: str | None) -> PlacedFigure | None:
    """`row`'s figures comparable with a timing taken in `placement`: its own there, or
    its single-CPU figures (which compare with any); None when it has neither."""
    figs = placed_figures(row)
    return figs.get(placement) or figs.get(SINGLE)


def _candidates(rows: Sequence[ResultRow]) -> list[str | None]:
    """The placements to look for, in order: `PREFERENCE`, then any other label the rows
    carry (none, for rows without a probe)."""
    seen = (s for r in rows for s in placed_figures(r) if s not in PREFERENCE)
    return [*PREFERENCE, *dict.fromkeys(seen)]


def shared_placement(rows: Sequence[ResultRow]) -> tuple[bool, str | None]:
    """(found, placement): the first of `_candidates` every row of `rows` has figures in
    that can decide (`PlacedFigure.decides`), else the first they merely all have.
    `found` is False when there is none: the rows cannot be compared."""
    shared = [state for state in _candidates(rows)
              if rows and all(figure_in(r, state) is not None for r in rows)]
    for state in shared:
        if all(f.decides for r in rows if (f := figure_in(r, state)) is not None):
            return True, state
    return (True, shared[0]) if shared else (False, None)


@dataclass(frozen=True)
class Relation:
    """How row `a` compares with row `b`: `ratio` is b's median over a's in `placement`
    (above 1: a is faster), `verdict` decided by the two 95% intervals."""

    verdict: Verdict
    ratio: float | None = None
    placement: str | None = None
    #: The intervals were missing: the verdict rests on the medians alone.
    medians_only: bool = False

    def text(self, faster: str = "faster", slower: str = "slower") -> str:
        """'1.30x faster', '2.10x slower', 'tie (1.04x)' or 'not comparable', read as what
        `a` is against `b`."""
        if self.verdict == "incomparable" or self.ratio is None:
            return "not comparable"
        if self.verdict == "tie":
            return f"tie ({self.ratio:.2f}x)" if self.ratio >= 1 else f"tie ({1 / self.ratio:.2f}x)"
        if self.ratio >= 1:
            return f"{self.ratio:.2f}x {faster}"
        return f"{1 / self.ratio:.2f}x {slower}"


def relate(a: ResultRow, b: ResultRow) -> Relation:
    """`a` against `b` in their preferred shared placement (see the module doc)."""
    found, placement = shared_placement([a, b])
    fa, fb = (figure_in(a, placement), figure_in(b, placement)) if found else (None, None)
    if fa is None or fb is None or fa.median_ms <= 0:
        return Relation("incomparable")
    ratio = fb.median_ms / fa.median_ms
    ends = (fa.ci_low_ms, fa.ci_high_ms, fb.ci_low_ms, fb.ci_high_ms)
    if any(e is None for e in ends):
        verdict: Verdict = "a_faster" if ratio > 1 else "b_faster" if ratio < 1 else "tie"
        return Relation(verdict, ratio, placement, medians_only=True)
    lo_a, hi_a, lo_b, hi_b = (float(e) for e in ends)  # type: ignore[arg-type]
    verdict = "a_faster" if hi_a < lo_b else "b_faster" if hi_b < lo_a else "tie"
    if not (fa.decides and fb.decides):
        verdict = "tie"  # one round: no interval to separate
    return Relation(verdict, ratio, placement)


def fastest(rows: Sequence[ResultRow]) -> tuple[ResultRow, PlacedFigure] | None:
    """The row with the smallest median among those that compare in one placement: the
    preferred placement the most rows have figures in (rows timed only elsewhere cannot
    be ranked against them, and are left out)."""
    timed = [r for r in rows if placed_figures(r)]
    if not timed:
        return None
    states = _candidates(timed)
    best_state = max(states, key=lambda s: (sum(figure_in(r, s) is not None for r in timed),
                                            -states.index(s)))
    ranked = [(r, f) for r in timed if (f := figure_in(r, best_state)) is not None]
    return min(ranked, key=lambda rf: rf[1].median_ms, default=None)
