"""Where the next independent run of a point will land: the across-runs interval.

Why a second interval: a row's confidence interval (`latency_ci_*`) resamples the rounds
and runs it has, so it says how well they pin their own median down (often within 1%),
not where another `dlas run` minutes or days later will put it. On the 2-vCPU cloud VMs
dlas runs on, the machine's state moves over minutes by amounts no probe inside a run
predicts (docs/timing.md), and by different amounts per runtime: independent invocations
of the quickstart, each in its own workspace, disagreed by several percent and up to 30%
within one vCPU placement. An interval a reader compares last week's row against has to
cover that drift, or it promises what the machine does not keep.

So each row also carries a range for the next run (`next_run_low_ms`, `next_run_high_ms`):
its median widened, in log space, by `Drift.half_width`, the 95th percentile of |log
ratio| between a run and the next independent run of the same compiled artifact in the
same placement, for the row's runtime, on this machine (`dlas.results.drift_record`
keeps those pairs across workspaces), and never narrower than the row's own interval.
Until the machine has `MIN_PAIRS` such pairs for a runtime, the range rests on `PRIOR`,
measured on the VMs dlas has run on, and the row says so (`next_run_basis`).

A runtime's drift is one figure for all its rows, and on a host whose state moves the
rows do not drift alike. On a 2-vCPU Zen 4 whose SMT neighbours were busy most of the
time (2026-11-30, four independent quickstart timing invocations), a short two-thread
kernel's chunks read 1.1-1.3x slower with a sibling busy than with both idle, in one
placement, a long one's within 5%, and which state a run's few chunks fell in moved its
row: the next invocation landed inside the runtime-wide range for 70% of TVM's rows, 42%
of ONNX Runtime's and 58% of PyTorch's. A row's own chunks show how far its states lie
apart, so its range is never narrower than their spread (`row_drift`: the interquartile
ratio of its chunk medians in its placement). Replayed on those invocations' stored
chunks, that took the coverage to 81%, 100% and 92%; on calmer runs (eight invocations
on the evening before, same host class) it widened almost nothing (TVM's half-widths:
median 4.5%, 90th percentile 4.6%, as before) and every next run was already inside.

Comparisons (`dlas.report.comparisons`) widen the same way when two points were not timed
in the same rounds (different timing workers, different invocations): a drift that hit
one and not the other is then part of their ratio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Coverage the range aims at: the next run's median falls inside for this share of rows.
COVERAGE = 0.95
#: Pairs of a runtime on this machine before its own percentile replaces the prior.
MIN_PAIRS = 30
#: |log ratio| half-widths before this machine has its own pairs, per runtime: about the
#: largest differences between single runs of one point in the same placement seen
#: across invocations on the VMs dlas ran on (Zen 1, 4 and 5; docs/timing.md), so that
#: a first run errs wide rather than narrow.
PRIOR: dict[str, float] = {"tvm": 0.10, "onnxruntime": 0.15, "pytorch": 0.20}
#: A runtime not in `PRIOR` (a plugin's) gets the widest.
PRIOR_OTHER = max(PRIOR.values())


@dataclass(frozen=True)
class Drift:
    """How far a run of `runtime` and the next independent one may differ (95%)."""

    runtime: str
    #: |log ratio| (0.05 is about 5%).
    half_width: float
    #: Pairs of runs on this machine it was measured from; 0 for the prior.
    pairs: int

    @property
    def basis(self) -> str:
        """'this machine, 84 pairs' or 'prior, 12 of 30 pairs measured here': what a
        row's range rests on, as `next_run_basis` says it."""
        if self.pairs >= MIN_PAIRS:
            return f"this machine, {self.pairs} pairs"
        return f"prior, {self.pairs} of {MIN_PAIRS} pairs measured here"


@dataclass(frozen=True)
class RowDrift:
    """The half-width a row's next-run range is widened by, and what it rests on."""

    #: |log ratio|: the runtime's drift, or the row's chunk spread where that is wider.
    half_width: float
    #: `Drift.basis`, plus the chunk spread where that set the width.
    basis: str


#: How `next_run_basis` says that a row's own chunks set its range (`row_drift`).
WIDENED = "; widened to its own chunks' spread"


def widened(basis: str | None) -> bool:
    """Whether a row's `next_run_basis` says its own chunks' spread set its range."""
    return WIDENED in (basis or "")


def row_drift(drift: Drift, chunk_spread: float | None) -> RowDrift:
    """The row's half-width: its runtime's drift on this machine, or the spread of its own
    chunks (`dlas.results.latency.chunk_spread`) where they lie further apart (see the
    module doc: those states are where the next run's few chunks may fall)."""
    if chunk_spread is None or chunk_spread <= drift.half_width:
        return RowDrift(drift.half_width, drift.basis)
    return RowDrift(chunk_spread, f"{drift.basis}{WIDENED} "
                                  f"({100 * math.expm1(chunk_spread):.1f}%, interquartile)")


def prior(runtime: str) -> Drift:
    return Drift(runtime, PRIOR.get(runtime, PRIOR_OTHER), 0)


def estimate(runtime: str, log_ratios: Sequence[float]) -> Drift:
    """The drift of `runtime` from |log ratio|s of run pairs on this machine: their
    `COVERAGE` percentile once there are `MIN_PAIRS`, else the prior (with the count)."""
    if len(log_ratios) < MIN_PAIRS:
        return Drift(runtime, prior(runtime).half_width, len(log_ratios))
    return Drift(runtime, float(np.quantile(np.abs(log_ratios), COVERAGE)), len(log_ratios))


def next_run_range(median: float, ci_low: float | None, ci_high: float | None,
                   drift: Drift | RowDrift) -> tuple[float, float]:
    """(low, high) ms: `median` widened by the drift, never inside the row's own CI."""
    low, high = median * math.exp(-drift.half_width), median * math.exp(drift.half_width)
    return (min(low, ci_low) if ci_low is not None else low,
            max(high, ci_high) if ci_high is not None else high)


def pair_half_width(a: float, b: float) -> float:
    """|log ratio| half-width that drift adds to the ratio of two points timed apart,
    from their runtimes' half-widths `a` and `b`: each point's run-level spread is its
    pair spread over sqrt(2), and the two add in quadrature (the same runtime twice gives
    that runtime's pair half-width)."""
    return math.sqrt((a ** 2 + b ** 2) / 2.0)


def widen(ratio: float, low: float, high: float, half_width: float) -> tuple[float, float]:
    """A ratio's interval with `half_width` of drift added in quadrature on each side."""
    down = math.log(ratio / low) if 0 < low <= ratio else 0.0
    up = math.log(high / ratio) if high >= ratio > 0 else 0.0
    return (ratio * math.exp(-math.hypot(down, half_width)),
            ratio * math.exp(math.hypot(up, half_width)))
