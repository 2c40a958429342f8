"""The report's same-work section: one dense kernel on two weight sets of one shape, which
must read the same (`dlas.results.same_work` says why and pairs the summary's rows; this
pairs the report's points the same way and compares them as every verdict is compared,
`compare_points`: one placement, paired by round where they shared rounds, widened by the
machine's drift where they did not). A pair that differs beyond that interval tells the
reader this host biases timings by more than the intervals say."""

from __future__ import annotations

from collections.abc import Hashable

from dlas.report.comparisons import compare_points
from dlas.report.data import ReportPoint
from dlas.report.render import Cell, Document, Heading, Para, Table
from dlas.results.same_work import group_pairs


def work_key(p: ReportPoint) -> Hashable | None:
    """Same work: a timed dense untuned kernel (or baseline) of one model, dataset,
    platform and precision, with the same parameter and MAC counts."""
    if not p.is_timed or p.sparse or (p.tuned and not p.baseline):
        return None
    if p.params is None or p.macs is None:
        return None
    return (p.dataset, p.model_label, p.platform, p.runtime, p.algorithm_label, p.tuning,
            p.precision, p.params, p.macs)


def same_work_section(doc: Document, points: list[ReportPoint]) -> None:
    found = group_pairs(points, work_key, lambda p: p.compression_label)
    if not found:
        return
    doc.add(Heading("Same work, two weight sets"))
    rows: list[list[Cell | str]] = []
    apart = 0
    for a, b in found:
        c = compare_points(a, b)
        if c.verdict == "incomparable" or c.ratio is None:
            verdict = "not comparable (no vCPU placement in common)"
        elif c.decided:
            apart += 1
            verdict = f"differ: {c.ratio:.3f}x [{c.low:.3f}, {c.high:.3f}]"
        else:
            verdict = f"agree: {c.ratio:.3f}x [{c.low:.3f}, {c.high:.3f}]"
        rows.append([a.platform, a.model_label, a.algorithm_label, a.compression_label,
                     b.compression_label, c.placement or "-", verdict])
    doc.add(Para(
        "A dense kernel does the same arithmetic whatever its weights hold, so an untuned "
        "dense algorithm on a model's unpruned and pruned weights must read the same. "
        f"{apart} of {len(found)} such pairs differ beyond their interval (the ratio's 95% "
        "interval, in one vCPU placement, widened by this machine's drift between timing "
        "runs)." + (" On this host a verdict smaller than their gap is not safe." if apart
                    else "")))
    doc.add(Table(["platform", "model", "algorithm", "first weights", "second weights",
                   "compared in", "second's time / first's [95%]"], rows, "Pairs"))
