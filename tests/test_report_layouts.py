"""Layer 4's data layouts in the report, on hand-built rows: each algorithm is taken at its
fastest layout with its NCHW time beside it, a "Data layouts" table lists every layout,
observations never compare two layouts of one algorithm as two algorithms and name the
layout of an algorithm they name, and a sweep without layouts reads as it always did."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from dlas.report import build_report
from dlas.report.data import NCHW, latest_per_label, layout_order
from dlas.report.figures import inference_figure, inference_panels
from dlas.report.layer_speedups import dense_reference
from dlas.report.observations import (
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    one_platform_generally_faster_than_another,
    sparse_gemm_best_on_cpu_direct_on_gpu,
    spatial_pack_best_on_tuned_cpu,
    tuning_accelerates_and_changes_best_choice,
)
from dlas.report.paper import load_paper
from dlas.report.profile_data import ProfiledPoint
from dlas.report.speedup import speedup_cells
from dlas.report.tables import (
    compare_algorithm,
    compare_compression,
    compare_overall,
    fastest_algorithm,
    layout_cells,
    layout_tables,
    speed_cells,
    speed_tables,
)
from dlas.results.layer_profile import PointProfile
from tests.test_observation_rules import TUNED, analysis, timed
from tests.test_report import XEON, make_db, point_from_row, points_of, row


def in_layout(base: dict[str, Any], layout: str | None, asked: str | None = None,
              block: int | None = None) -> dict[str, Any]:
    """`base` as the runner writes a row of an algorithm run in a layout: the resolved
    layout in the column (None: a row from before the column), what the config asked for
    in the algorithm's parameters (`asked`, default the column's, NCHWc for a blocked
    one) and the label the grid gives it."""
    asked = asked or ("NCHWc" if layout and layout.endswith("c") else layout)
    base["layout"] = layout
    if asked and asked != NCHW:
        params: dict[str, Any] = {"layout": asked}
        if block is not None:
            params["block"] = block
        base["config"]["choices"]["algorithms"]["params"] = params
        base["algorithm"] = f"{base['algorithm']}(layout={asked})"
    return base


def lrow(layout: str, **kw: Any) -> dict[str, Any]:
    return in_layout(row(**kw), layout)


def ltimed(layout: str, ms: float, half: float, **kw: Any) -> dict[str, Any]:
    return in_layout(timed(ms, half, **kw), layout)


# -- points ---------------------------------------------------------------------------------


def test_a_point_knows_its_layout_from_the_column_else_the_config_else_nchw() -> None:
    p = point_from_row(lrow("NCHW8c", algorithm="direct"))
    assert (p.algorithm, p.layout, p.layout_choice) == ("direct", "NCHW8c", "NCHWc")
    assert p.algorithm_label == "direct NCHW8c" and "direct NCHW8c" in p.describe()
    # a row without the column: the parameters say what it was asked to run in
    assert point_from_row(in_layout(row(), None, "NHWC")).layout == "NHWC"
    assert point_from_row(in_layout(row(), None, "NCHWc")).layout == "NCHWc"
    assert point_from_row(in_layout(row(), None, "NCHWc", block=16)).layout == "NCHW16c"
    # the paper's points, older rows and baselines: NCHW, labelled as they always were
    plain = point_from_row(row())
    assert (plain.layout, plain.algorithm_label) == (NCHW, "direct")
    assert point_from_row(row(tuning="onnxruntime", backend="onnxruntime")).layout == NCHW


def test_layouts_are_ordered_nchw_first_then_by_block_width() -> None:
    assert layout_order(["NCHW16c", "NHWC", "NCHW4c", "NCHW", "NCHW8c", "odd"]) == [
        "NCHW", "NHWC", "NCHW4c", "NCHW8c", "NCHW16c", "odd"]


def test_two_layouts_of_one_algorithm_are_two_points_not_a_rerun() -> None:
    kept, superseded = latest_per_label(points_of([row(updated_at=1.0),
                                                   lrow("NCHW8c", updated_at=2.0)]))
    assert superseded == 0 and {p.layout for p in kept} == {"NCHW", "NCHW8c"}


# -- speed cells and tables ---------------------------------------------------------------------


def _layout_rows() -> list[dict[str, Any]]:
    """Dense direct in three layouts (NCHW8c fastest), gemm and spatial pack in NCHW."""
    return [row(algorithm="direct", ms=16.9),
            lrow("NHWC", algorithm="direct", ms=9.0),
            lrow("NCHW8c", algorithm="direct", ms=4.23),
            row(algorithm="gemm", ms=8.0),
            row(algorithm="spatial_pack", ms=6.0),
            lrow("NHWC", algorithm="spatial_pack", ms=7.0),
            row(compression="weight_pruning", algorithm="gemm_csr", ms=5.0, sparsity=0.9)]


def test_a_cell_holds_the_algorithms_fastest_layout() -> None:
    (models,) = speed_cells(points_of(_layout_rows())).values()
    cells = models["resnet18"]
    assert set(cells) == {("none", "direct"), ("none", "gemm"), ("none", "spatial_pack"),
                          ("weight_pruning", "gemm_csr")}  # one cell per algorithm
    assert cells[("none", "direct")].layout == "NCHW8c"
    assert cells[("none", "spatial_pack")].layout == NCHW  # NHWC measured, slower
    best = fastest_algorithm(cells, "none")
    assert (best.algorithm_label, best.latency_ms) == ("direct NCHW8c", 4.23)
    (every,) = layout_cells(points_of(_layout_rows())).values()
    assert list(every["resnet18"][("none", "direct")]) == ["NCHW", "NHWC", "NCHW8c"]


def test_equal_medians_prefer_nchw_and_one_layouts_parameter_sets_keep_the_old_rule() -> None:
    (models,) = speed_cells(points_of([lrow("NHWC", ms=5.0), row(ms=5.0)])).values()
    assert models["resnet18"][("none", "direct")].layout == NCHW
    # several pruning levels of one algorithm and layout: the higher ratio (the paper's)
    rows = [lrow("NHWC", compression="weight_pruning", algorithm="gemm", ms=3.0,
                 sparsity=0.5),
            lrow("NHWC", compression="weight_pruning", algorithm="gemm", ms=4.0,
                 sparsity=0.9),
            row(compression="weight_pruning", algorithm="gemm", ms=6.0, sparsity=0.9)]
    (models,) = speed_cells(points_of(rows)).values()
    cell = models["resnet18"][("weight_pruning", "gemm")]
    assert (cell.layout, cell.latency_ms) == ("NHWC", 4.0)


def test_a_speed_row_keeps_the_nchw_point_beside_the_fastest_layout() -> None:
    paper = load_paper()
    (table,) = speed_tables(points_of(_layout_rows()), paper, {"host": "i7"})
    (r,) = table.rows
    best = r.fastest_algorithm["none"]
    assert best.layout == "NCHW8c" and r.nchw_of(best).latency_ms == 16.9
    assert r.nchw_of(r.cells[("none", "gemm")]) is None  # NCHW already
    assert set(r.nchw) == set(r.cells)  # every algorithm was measured in NCHW
    # the paper ran NCHW only: it is compared on the algorithm, the layout is named
    dense = compare_algorithm(best, r.paper.fastest_algorithm["none"], paper)
    assert (dense.ours, dense.paper, dense.differs) == ("direct NCHW8c", "Direct", False)
    assert compare_compression(r.fastest_compression["direct"], None, paper).ours == \
        "Dense NCHW8c"
    assert compare_overall(r.overall, None, paper).ours == "Dense+direct NCHW8c"
    # no NCHW point of the cell: nothing beside it
    (table,) = speed_tables(points_of([lrow("NHWC", ms=3.0)]))
    assert table.rows[0].nchw == {} and table.rows[0].nchw_of(
        table.rows[0].cells[("none", "direct")]) is None


def test_the_best_dense_time_of_the_expected_speedup_may_be_any_layout() -> None:
    (wp,) = speedup_cells(points_of(_layout_rows()))
    assert wp.dense.algorithm_label == "direct NCHW8c"
    assert wp.speedup == pytest.approx(4.23 / 5.0)


# -- the data layouts table ----------------------------------------------------------------------


def test_the_layout_table_lists_every_layout_the_fastest_and_its_speedup() -> None:
    (table,) = layout_tables(points_of(_layout_rows()))
    assert table.layouts == ["NCHW", "NHWC", "NCHW8c"]
    # gemm and gemm_csr ran in NCHW only: they say nothing about layouts
    assert [(r.compression, r.algorithm) for r in table.rows] == [
        ("none", "direct"), ("none", "spatial_pack")]
    direct, spatial = table.rows
    assert direct.fastest.layout == "NCHW8c"
    assert direct.speedup_over_nchw == pytest.approx(16.9 / 4.23)
    assert spatial.fastest.layout == NCHW and spatial.speedup_over_nchw == 1.0
    assert spatial.decided() is False
    assert layout_tables(points_of([row(), row(algorithm="gemm")])) == []


def test_the_layout_speedup_is_decided_on_the_intervals() -> None:
    apart = [timed(10.0, 0.1), ltimed("NCHW8c", 5.0, 0.1)]
    assert layout_tables(points_of(apart))[0].rows[0].decided() is True
    close = [timed(10.0, 0.5), ltimed("NCHW8c", 9.9, 0.5)]
    assert layout_tables(points_of(close))[0].rows[0].decided() is None
    alone = layout_tables(points_of([ltimed("NHWC", 5.0, 0.1)]))[0].rows[0]
    assert alone.speedup_over_nchw is None and alone.decided() is None


# -- observations ------------------------------------------------------------------------------


def test_obs_7_sees_each_algorithm_at_its_fastest_layout_and_names_it() -> None:
    rows = []
    for model in ("resnet18", "vgg16", "mobilenetv2"):
        kw = {"model": model, "tuning": TUNED}
        rows += [timed(5.0, 0.1, algorithm="direct", **kw),
                 timed(6.0, 0.1, algorithm="spatial_pack", **kw),  # NCHW: slower
                 ltimed("NCHW8c", 4.0, 0.1, algorithm="spatial_pack", **kw)]
    (part,) = spatial_pack_best_on_tuned_cpu(analysis(rows))
    assert part.status == HELD and "3 of 3 cases" in part.evidence[0]
    assert all(line.endswith(": spatial_pack NCHW8c") for line in part.evidence[1:])
    # the runner-up compared is the other algorithm, never spatial pack's other layout
    assert all(c.base.algorithm == "direct" for c in part.comparisons)


def test_two_layouts_of_one_algorithm_are_not_two_families() -> None:
    """direct in NCHW and NCHW8c, nothing else: one family, so VII has nothing to decide
    (as two algorithms, the faster layout would have 'won' against the slower)."""
    rows = [timed(5.0, 0.1, algorithm="spatial_pack", tuning=TUNED),
            ltimed("NCHW8c", 3.0, 0.1, algorithm="spatial_pack", tuning=TUNED)]
    (part,) = spatial_pack_best_on_tuned_cpu(analysis(rows))
    assert part.status == NOT_MEASURED


def test_obs_9_ties_name_the_layout() -> None:
    sparse = {"compression": "weight_pruning", "sparsity": 0.9}
    rows = [timed(5.0, 0.1, algorithm="gemm_csr", **sparse),
            timed(3.0, 0.1, algorithm="direct_csr", **sparse),
            ltimed("NHWC", 3.05, 0.1, algorithm="spatial_pack", **sparse)]
    cpu, _ = sparse_gemm_best_on_cpu_direct_on_gpu(analysis(rows))
    assert cpu.status == NOT_HELD and "ties with spatial_pack NHWC" in cpu.evidence[1]


def test_obs_11_pairs_untuned_and_tuned_in_the_same_layout() -> None:
    rows = [timed(100.0, 1.0), timed(40.0, 0.5, tuning=TUNED),
            ltimed("NCHW8c", 50.0, 0.5), ltimed("NCHW8c", 20.0, 0.2, tuning=TUNED)]
    accel, change = tuning_accelerates_and_changes_best_choice(analysis(rows))
    assert accel.status == HELD and "2.50x" in accel.evidence[0]
    assert "over 2 points" in accel.evidence[0]
    assert {c.case for c in accel.comparisons} == {
        "host · Test Xeon resnet18 Dense direct", "host · Test Xeon resnet18 Dense direct NCHW8c"}
    assert all(c.base.layout == c.other.layout for c in accel.comparisons)
    # the fastest algorithm is direct either way: no change of choice
    assert change.status == NOT_HELD


def test_obs_11_a_change_names_the_layouts() -> None:
    rows = [ltimed("NCHW8c", 10.0, 0.1), timed(12.0, 0.1, algorithm="gemm"),
            ltimed("NCHW8c", 8.0, 0.1, tuning=TUNED),
            timed(5.0, 0.1, algorithm="gemm", tuning=TUNED)]
    _, change = tuning_accelerates_and_changes_best_choice(analysis(rows))
    assert change.status == HELD
    assert any("direct NCHW8c untuned, gemm tuned" in line for line in change.evidence)
    assert any("Dense+direct NCHW8c untuned, Dense+gemm tuned" in line
               for line in change.evidence)


def test_obs_13_matches_platforms_on_the_layout_the_config_asked_for() -> None:
    """NCHWc is NCHW16c on an AVX-512 CPU and NCHW4c on a Neon one: the same point."""
    arm = {**XEON, "cpu": {**XEON["cpu"], "model": "Test Cortex-A73"}}
    rows = []
    for model in ("resnet18", "vgg16"):
        rows += [ltimed("NCHW16c", 2.0, 0.1, model=model),
                 ltimed("NCHW4c", 8.0, 0.1, model=model, environment=arm),
                 timed(4.0, 0.1, model=model), timed(9.0, 0.1, model=model, environment=arm)]
    cpu, _ = one_platform_generally_faster_than_another(analysis(rows))
    assert cpu.status == HELD and "in 4 of 4 matched points" in cpu.evidence[0]


# -- profiles ----------------------------------------------------------------------------------


def _profiled(r: dict[str, Any]) -> ProfiledPoint:
    profile = PointProfile(key="", runtime="tvm", label="synthetic", latency_median_ms=1.0,
                           layers_sum_ms=1.0, unaccounted=0.0, method="synthetic", layers=[])
    return ProfiledPoint(point_from_row(r), "", profile, None)


def test_a_compressed_point_is_paired_with_the_dense_point_of_its_layout() -> None:
    dense = [_profiled(row()), _profiled(lrow("NHWC")), _profiled(lrow("NCHW8c"))]
    int8_nhwc = _profiled(lrow("NHWC", compression="int8"))
    assert dense_reference(int8_nhwc, dense).point.layout == "NHWC"
    csr = _profiled(row(compression="weight_pruning", algorithm="direct_csr", sparsity=0.9))
    assert dense_reference(csr, list(reversed(dense))).point.layout == NCHW


# -- the written report ------------------------------------------------------------------------


def test_the_report_names_layouts_and_shows_nchw_beside_them(tmp_path: Path) -> None:
    db = make_db(tmp_path / "r.db", _layout_rows())
    files = build_report(db, tmp_path / "out")
    md = files.markdown.read_text()
    speed = md[md.index("## Fastest algorithm"):md.index("## Inference time")]
    assert "direct NCHW8c, 4.23 ms · NCHW 16.9 ms" in speed  # fastest algorithm, dense
    assert "Dense NCHW8c, 4.23 ms · NCHW 16.9 ms" in speed  # fastest compression, direct
    assert "Dense+direct NCHW8c, 4.23 ms · NCHW 16.9 ms" in speed  # overall
    assert "fastest data layout" in speed
    layouts = md[md.index("## Data layouts"):md.index("## Expected speedup")]
    assert "| NCHW | NHWC | NCHW8c | fastest layout | speedup over NCHW |" in layouts
    assert "| NCHW8c | 4.00x" in layouts and "1.00x (NCHW fastest)" in layouts
    assert "the best dense time may be in any layout" in md
    assert "direct NCHW8c, 4.23 ms" in md[md.index("## Expected speedup"):]
    assert "resnet18 / none / direct NCHW8c / none / host" in md  # verification


def test_a_sweep_without_layouts_has_no_layout_section_or_column(tmp_path: Path) -> None:
    rows = [row(ms=10.0), row(algorithm="gemm", ms=8.0)]
    files = build_report(make_db(tmp_path / "r.db", rows), tmp_path / "out")
    md = files.markdown.read_text()
    assert "Data layouts" not in md and "NCHW" not in md
    with open(tmp_path / "out" / "figures" / "inference-cifar10-cpu.csv") as fh:
        assert "layout" not in next(csv.reader(fh))


def test_the_figure_bars_carry_the_fastest_layout(tmp_path: Path) -> None:
    points = points_of(_layout_rows())
    panels = inference_panels(points, "cifar10", "cpu")
    bars = {(b.compression, b.algorithm): b for b in panels.bars}
    assert len(panels.bars) == 4  # one bar per algorithm, not per layout
    assert (bars[("none", "direct")].layout, bars[("none", "direct")].median_ms) == (
        "NCHW8c", 4.23)
    png = inference_figure(points, "cifar10", "cpu", tmp_path / "inference.png")
    with open(png.with_suffix(".csv")) as fh:
        plotted = {(r["compression"], r["algorithm"]): r for r in csv.DictReader(fh)}
    assert plotted[("none", "direct")]["layout"] == "NCHW8c"
    assert plotted[("none", "gemm")]["layout"] == NCHW
