"""For each observation, the layers that decide it: a comparison's change split over the
layers of two synthetic profiles, checked by hand, and the report's observation section
naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlas.report import build_report
from dlas.report.data import ReportPoint
from dlas.report.deciding_layers import OUTSIDE, explain, observation_layers
from dlas.report.layer_speedups import align_convs, conv_layers
from dlas.report.observations import ComparedPair, observations
from dlas.report.profile_data import ProfiledPoint, load_profiles
from tests.test_report import make_db, point_from_row
from tests.test_report_profiles import (
    CONV0,
    CONV1,
    LIMITS,
    conv,
    dense_direct,
    other,
    profile,
    pruned_direct_csr,
    store,
)
from tests.test_report_profiles import _rows as report_rows


def _profiled(name: str, prof: object) -> ProfiledPoint:
    point = point_from_row(report_rows()[name])
    return ProfiledPoint(point, f"t-{name}", prof, LIMITS)  # type: ignore[arg-type]


def _by_name(layers: object) -> dict[str, object]:
    return {c.name.split(" (")[0]: c for c in layers.changes}  # type: ignore[attr-defined]


def test_a_change_is_split_over_the_layers_by_hand() -> None:
    """direct 0.7 ms -> gemm 0.9 ms: conv 1 400 -> 600 us is the whole 200 us change;
    conv 0 +50, the layers gemm has not (layout, pool, dense: -100) and the time outside
    the layers (100 -> 150 us) cancel."""
    dense = _profiled("direct", dense_direct())
    gemm = _profiled("gemm", profile([conv(0, 0, CONV0, 150.0), conv(1, 1, CONV1, 600.0)],
                                     0.9))
    layers = explain(ComparedPair("case", dense.point, gemm.point),
                     {dense.point.key: dense, gemm.point.key: gemm})
    assert layers is not None and not layers.expected
    assert layers.whole_us == pytest.approx(200.0)
    changes = _by_name(layers)
    assert changes["conv 1"].delta_us == pytest.approx(200.0)  # type: ignore[attr-defined]
    assert changes["conv 0"].delta_us == pytest.approx(50.0)  # type: ignore[attr-defined]
    assert changes[OUTSIDE].delta_us == pytest.approx(50.0)  # type: ignore[attr-defined]
    assert changes["pool layers"].delta_us == pytest.approx(-50.0)  # type: ignore[attr-defined]
    assert layers.top(1)[0].name.startswith("conv 1 (16->32 3x3")
    assert layers.share(layers.top(1)[0]) == pytest.approx(1.0)
    assert sum(layers.share(c) or 0 for c in layers.changes) == pytest.approx(1.0)


def test_a_pruned_point_is_explained_by_the_time_lost_against_its_ideal() -> None:
    """conv 1 at 25% density: ideal 400 x 0.25 = 100 us, measured 150 + 50 = 200 us, so
    100 us lost; conv 0 (unpruned) 100 -> 120 us loses 20; the layout kernel the CSR point
    has not gains 30 and the time outside the layers (100 -> 60 us) 40. The ideal model
    takes 400 us, so the expected speedup is 700 / 400 = 1.75x; 700 / 450 = 1.56x is 89% of
    it."""
    dense = _profiled("direct", dense_direct())
    csr = _profiled("csr", pruned_direct_csr())
    layers = explain(ComparedPair("case", dense.point, csr.point, "expected"),
                     {dense.point.key: dense, csr.point.key: csr})
    assert layers is not None and layers.expected
    changes = _by_name(layers)
    conv1 = changes["conv 1"]
    assert conv1.density == pytest.approx(0.25)  # type: ignore[attr-defined]
    assert conv1.ideal_us == pytest.approx(100.0)  # type: ignore[attr-defined]
    assert conv1.lost_us == pytest.approx(100.0)  # type: ignore[attr-defined]
    assert changes["conv 0"].lost_us == pytest.approx(20.0)  # type: ignore[attr-defined]
    assert changes["layout layers"].lost_us == pytest.approx(-30.0)  # type: ignore[attr-defined]
    assert changes[OUTSIDE].lost_us == pytest.approx(-40.0)  # type: ignore[attr-defined]
    assert layers.whole_us == pytest.approx(450.0 - 400.0)
    assert layers.percent_expected == pytest.approx(100 * (0.7 / 0.45) / 1.75)
    assert layers.top(1)[0] is conv1


def test_convs_pair_by_shape_where_indices_disagree_and_by_index_where_shapes_all_do() -> None:
    """A quantised model's convs may be numbered in another order (int8 MobileNetV2:
    53-55 are the float model's 55, 53, 54); channel pruning changes every shape and keeps
    the order."""
    a = conv_layers(profile([conv(0, 0, CONV0, 1.0), conv(1, 1, CONV1, 1.0),
                             conv(2, 2, [64, 32, 3, 3], 1.0)], 0.1))
    swapped = conv_layers(profile([conv(0, 0, [64, 32, 3, 3], 1.0), conv(1, 1, CONV0, 1.0),
                                   conv(2, 2, CONV1, 1.0)], 0.1))
    assert align_convs(a, swapped) == {0: 2, 1: 0, 2: 1}
    assert align_convs(a, a) == {0: 0, 1: 1, 2: 2}
    thinner = conv_layers(profile([conv(0, 0, [8, 3, 3, 3], 1.0),
                                   conv(1, 1, [16, 8, 3, 3], 1.0)], 0.1))
    assert align_convs(a, thinner) == {0: 0, 1: 1}


def test_no_profiles_no_explanation() -> None:
    dense = _profiled("direct", dense_direct())
    gemm = point_from_row(report_rows()["gemm"])
    assert explain(ComparedPair("case", dense.point, gemm), {dense.point.key: dense}) is None


def _profiled_db(tmp_path: Path) -> tuple[Path, list[ReportPoint]]:
    rows = report_rows()
    db = make_db(tmp_path / "results.db", [rows["direct"], rows["gemm"], rows["csr"],
                                           rows["unprofiled"]])
    store(db, rows["direct"]["point_key"], "t-direct", dense_direct())
    store(db, rows["gemm"]["point_key"], "t-gemm",
          profile([conv(0, 0, CONV0, 150.0), conv(1, 1, CONV1, 600.0),
                   other(2, "pool", 50.0)], 0.9))
    store(db, rows["csr"]["point_key"], "t-csr", pruned_direct_csr())
    points = [point_from_row(rows[k]) for k in ("direct", "gemm", "csr", "unprofiled")]
    return db, points


def test_observation_parts_carry_their_comparisons_and_name_the_layers(
        tmp_path: Path) -> None:
    db, points = _profiled_db(tmp_path)
    obs = {o.number: o for o in observations(points)}
    pruning = obs[10].parts[0]
    assert pruning.status != "not measured"
    assert pruning.comparisons and all(c.kind == "expected" for c in pruning.comparisons)
    assert all(c.base.compression == "none" and c.other.compression == "weight_pruning"
               for c in pruning.comparisons)
    profiled = {p.point.key: p for p in load_profiles(db, points).points}
    sections = observation_layers(obs[10], profiled)
    assert len(sections) == 1
    head, lines = sections[0]
    assert head.startswith("X, pruning below its expected speedup: the layers that decide")
    assert len(lines) == 1 and "conv 1 (16->32 3x3 @32x32)" in lines[0]
    assert "at density 25.0%" in lines[0] and "89% of its expected speedup" in lines[0]
    # accuracy and correlation parts compare no points, and say nothing here
    assert observation_layers(obs[1], profiled) == []


def test_the_report_puts_the_layers_under_each_observation(tmp_path: Path) -> None:
    db, _ = _profiled_db(tmp_path)
    md = build_report(db, tmp_path / "out").markdown.read_text()
    obs = md[md.index("## The paper's thirteen observations"):]
    x = obs[obs.index("### X:"):obs.index("### XI:")]
    assert "X, pruning below its expected speedup: the layers that decide it" in x
    assert "conv 1 (16->32 3x3 @32x32) 0.400 -> 0.200 ms" in x
