"""The report's reproducibility section: how far independent timing runs of one point
agreed on this machine, per runtime, and how often the next run fell inside the range each
row carries (`dlas.results.reproducibility`, `dlas.results.drift`)."""

from __future__ import annotations

from dlas.report.data import RUNTIME_NAMES, ReportPoint
from dlas.report.render import Document, Heading, Para, Table
from dlas.results.reproducibility import (
    TVM,
    TimedPoint,
    pct,
    range_coverage,
    run_agreement,
)


def reproducibility_section(doc: Document, points: list[ReportPoint]) -> None:
    """How far independent timing runs agreed, per runtime (`dlas.results.reproducibility`):
    what a row's interval does not say."""
    doc.add(Heading("Reproducibility: how far timing runs agree on this machine"))
    unique = {p.key: p for p in points if p.is_timed and p.runs}
    timed = [TimedPoint(p.describe(), p.runtime, p.runs, p.next_run_drift)
             for p in unique.values()]
    agreement = run_agreement(timed)
    intro = ("A row's 95% interval says how well its timing runs pin its median down, not "
             "where a new run would land: on shared cloud VMs the machine's state moves "
             "over minutes, and some runtimes feel it far more than others "
             "(docs/timing.md).")
    if not agreement:
        doc.add(Para(intro + " Every point here was timed in one run (or its runs were "
                     "taken in different vCPU placements). `dlas run CONFIG --remeasure` "
                     "times every point again from the cached modules; this section then "
                     "shows, per runtime, how far two runs of one point differ."))
        next_run_paragraph(doc, timed)
        return
    counts = sorted(len(p.runs) for p in unique.values())
    pooled = (f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]} to {counts[-1]}")
    doc.add(Para(intro + " Every two timing runs of one point taken in the same vCPU "
                 "placement, compared by their own medians. Each row's figures pool all "
                 f"of its runs ({pooled} here), so they move less than one run does "
                 "(`budgets: timing_passes`, docs/timing.md)."))
    doc.add(Table(
        ["runtime", "points", "pairs of runs", "median difference", "worst difference",
         "worst point (ms, ms)"],
        [[RUNTIME_NAMES.get(a.runtime, "TVM" if a.runtime == TVM else a.runtime),
          str(a.points), str(a.pairs), pct(a.median), pct(a.worst),
          f"{a.worst_point} ({a.worst_ms[0]:.3g}, {a.worst_ms[1]:.3g})"]
         for a in agreement],
        "Difference between two runs of one point: |median A / median B - 1| with the "
        "larger over the smaller."))
    next_run_paragraph(doc, timed)


def next_run_paragraph(doc: Document, timed: list[TimedPoint]) -> None:
    """Which interval the rows carry for the next run, and its coverage measured here."""
    covered = range_coverage(timed)
    text = ("Each row also carries where the next independent run of its point should land "
            "(95%, 'next run' in `dlas results`): its median widened by this machine's "
            "run-to-run drift for its runtime, measured from earlier invocations' runs of "
            "the same compiled artifacts (`dlas.results.drift`), or a prior until 30 such "
            "pairs exist. Comparisons between points not timed in the same rounds "
            "(other models, other invocations) carry that drift too.")
    if not covered:
        doc.add(Para(text + " No point here has two runs in one placement, so the ranges' "
                     "coverage is not measured in this workspace (docs/timing.md gives "
                     "the benchmark's)."))
        return
    doc.add(Para(text + " Coverage measured on this workspace's consecutive runs of each "
                 "point (passes and --remeasure runs alike):"))
    doc.add(Table(
        ["runtime", "drift (95%)", "pairs of runs", "later run inside the range"],
        [[RUNTIME_NAMES.get(c.runtime, "TVM" if c.runtime == "tvm" else c.runtime),
          f"±{pct(c.drift)}", str(c.pairs), f"{c.inside} ({100 * c.share:.0f}%)"]
         for c in covered],
        "A pair: a run and the next run of the same point in the same vCPU placement."))
