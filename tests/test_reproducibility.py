"""How far timing runs of one point agree, per runtime (`dlas.results.reproducibility`),
and the report's section that shows it. Runs are built by hand so each test knows the
differences to expect."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from dlas.measure.placement import FAR, NEAR
from dlas.measure.record import TimingRound, TimingRun
from dlas.report.data import point_from_row
from dlas.report.render import Document, to_markdown
from dlas.report.reproducibility import reproducibility_section
from dlas.results.reproducibility import TVM, TimedPoint, pct, run_agreement, run_figures
from dlas.results.row import ResultRow


def timing_run(run_id: str, ms: float, *, at: float, placement: str = NEAR,
               rounds: int = 10) -> TimingRun:
    """A run of `rounds` rounds, 5 samples each, all at `ms`."""
    return TimingRun(run_id=run_id, started_at=at, placement=placement,
                     policy={"min_rounds": rounds},
                     rounds=[TimingRound(index=i, placement=placement, samples_ms=[ms] * 5)
                             for i in range(rounds)])


def test_each_run_has_its_own_figure_oldest_first() -> None:
    runs = [timing_run("b", 2.0, at=20.0), timing_run("a", 1.0, at=10.0),
            timing_run("c", 3.0, at=30.0, placement=FAR)]
    figs = run_figures(runs)
    assert [(f.run_id, f.placement, f.median_ms) for f in figs] == [
        ("a", NEAR, 1.0), ("b", NEAR, 2.0), ("c", FAR, 3.0)]


def test_agreement_per_runtime_within_one_placement_only() -> None:
    """TVM: runs at 1.00, 1.05 and 1.10 ms near (worst 10%, median 5%); a far run at 2 ms
    is compared with nothing (placements differ by design). PyTorch: 2.0 vs 2.6 ms. A
    point timed once adds nothing; TVM comes first."""
    points = [
        TimedPoint("m / direct", TVM, [timing_run("1", 1.0, at=1), timing_run("2", 1.05, at=2),
                                        timing_run("3", 1.10, at=3),
                                        timing_run("4", 2.0, at=4, placement=FAR)]),
        TimedPoint("m / pytorch", "pytorch", [timing_run("1", 2.0, at=1),
                                              timing_run("2", 2.6, at=2)]),
        TimedPoint("m / gemm", TVM, [timing_run("1", 5.0, at=1)]),
    ]
    tvm, torch = run_agreement(points)
    assert (tvm.runtime, tvm.points, tvm.pairs) == (TVM, 1, 3)
    assert tvm.worst == pytest.approx(math.log(1.10))
    assert tvm.median == pytest.approx(math.log(1.05))
    assert tvm.worst_ms == (1.0, 1.10) and tvm.worst_point == "m / direct"
    assert (torch.runtime, torch.pairs) == ("pytorch", 1)
    assert pct(torch.worst) == "30.0%"
    assert "30.0% worst over 1 pairs of runs of 1 points" in torch.describe()


def test_no_point_timed_twice_in_one_placement_gives_nothing() -> None:
    points = [TimedPoint("m / direct", TVM, [timing_run("1", 1.0, at=1),
                                              timing_run("2", 2.0, at=2, placement=FAR)])]
    assert run_agreement(points) == []


def _point(algorithm: str, runs: list[TimingRun], *, backend: str = "tvm"):  # noqa: ANN202
    row = ResultRow(point_key=f"k-{algorithm}", sweep="s", status="ok", dataset="digits",
                    model="resnet18", compression="none", algorithm=algorithm,
                    tuning="none" if backend == "tvm" else backend, target="host",
                    backend=backend, verified=1, latency_median_ms=1.0)
    return replace(point_from_row(row, runs), verified=True, latency_ms=1.0)


def test_report_section_says_how_to_measure_it_when_every_point_ran_once() -> None:
    doc = Document("t")
    reproducibility_section(doc, [_point("direct", [timing_run("1", 1.0, at=1)])])
    text = to_markdown(doc, Path("."))
    assert "Reproducibility" in text and "--remeasure" in text
    assert "pairs of runs" not in text


def test_report_section_tabulates_runs_per_runtime() -> None:
    points = [_point("direct", [timing_run("1", 1.0, at=1), timing_run("2", 1.08, at=2)]),
              _point("pytorch", [timing_run("1", 2.0, at=1), timing_run("2", 2.5, at=2)],
                     backend="pytorch")]
    doc = Document("t")
    reproducibility_section(doc, points)
    text = to_markdown(doc, Path("."))
    assert "| TVM | 1 | 1 | 8.0% | 8.0% |" in text
    assert "| PyTorch | 1 | 1 | 25.0% | 25.0% |" in text
    assert "pool all of its runs (2 here)" in text
