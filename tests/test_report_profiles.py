"""The report's "Where the time goes" section on synthetic per-layer profiles: stored with
`save_profile` beside matching rows, then the report built and read back."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dlas.profile.limits import MachineLimits
from dlas.profile.roofline import place_layers
from dlas.report import build_report
from dlas.report.layer_speedups import pair_speedups
from dlas.report.profile_data import ProfiledPoint, load_profiles
from dlas.report.profiles import MAX_ROOFLINE_POINTS, select_roofline_points
from dlas.results.layer_profile import LayerTime, PointProfile
from dlas.results.profiles import save_profile
from dlas.results.store import ResultStore
from tests.test_report import make_db, point_from_row, row

LIMITS = MachineLimits(
    tvm_target={"kind": "llvm"}, threads=2, cpus=[0, 1], peak_gflops={"float32": 200.0},
    theoretical_gflops={"float32": 250.0},
    theoretical_basis="2 cores x 8 lanes x 2 FMA pipes x 2 x 3.9 GHz",
    clock_ghz={"measured": 3.9}, bandwidth_gbs={"L1": 800.0, "L2": 400.0, "L3": 150.0,
                                                 "DRAM": 30.0},
    bandwidth_bytes={"L1": 32 << 10, "L2": 1 << 20, "L3": 16 << 20, "DRAM": 256 << 20},
    level_bytes={"L1": 32 << 10, "L2": 1 << 20, "L3": 32 << 20, "DRAM": 16 << 30},
    measured_at=0.0, seconds=1.0, machine={})

CONV0, CONV1 = [16, 3, 3, 3], [32, 16, 3, 3]  # 432 and 4608 weights


def conv(index: int, conv_index: int, weight: list[int], time_us: float,
         nnz: int | None = None, calls: int = 1) -> LayerTime:
    cout, cin = weight[0], weight[1]
    macs = cout * 32 * 32 * cin * 9
    return LayerTime(index=index, name=f"conv{conv_index}_{index}", op="conv2d",
                     conv_index=conv_index, data_shape=[1, cin, 32, 32], weight_shape=weight,
                     out_shape=[1, cout, 32, 32], strides=[1, 1], padding=[1, 1, 1, 1],
                     groups=1, dtype="float32", macs=macs,
                     nnz=nnz if nnz is not None else cout * cin * 9, flops=2.0 * macs,
                     bytes=4 * (cin * 1024 + cout * cin * 9 + cout * 1024), calls=calls,
                     time_us=time_us)


def other(index: int, op: str, time_us: float) -> LayerTime:
    return LayerTime(index=index, name=f"{op}_{index}", op=op, out_shape=[1, 32, 16, 16],
                     flops=8192.0, bytes=4 * 8192 * 2, time_us=time_us)


def profile(layers: list[LayerTime], latency_ms: float, runtime: str = "tvm") -> PointProfile:
    placed = place_layers(layers, LIMITS)
    total = sum(layer.time_us * layer.calls for layer in placed) / 1e3
    return PointProfile(key="", runtime=runtime, label="synthetic",
                        latency_median_ms=latency_ms, layers_sum_ms=total,
                        unaccounted=1 - total / latency_ms, method="synthetic",
                        layers=placed)


def dense_direct() -> PointProfile:
    """0.7 ms: convs 0.5 ms, pool 0.05, dense 0.02, layout 0.03; 0.1 ms outside."""
    return profile([conv(0, 0, CONV0, 100.0), other(1, "layout", 30.0),
                    conv(2, 1, CONV1, 400.0), other(3, "pool", 50.0),
                    other(4, "dense", 20.0)], 0.7)


def pruned_direct_csr() -> PointProfile:
    """conv 0 unpruned (120 us); conv 1 at 25% density in two kernels (150 + 50 us)."""
    return profile([conv(0, 0, CONV0, 120.0), conv(1, 1, CONV1, 150.0, nnz=1152),
                    conv(2, 1, CONV1, 50.0, nnz=1152), other(3, "pool", 50.0),
                    other(4, "dense", 20.0)], 0.45)


def store(db: Path, point_key: str, timing_key: str, prof: PointProfile,
          limits: dict[str, Any] | None = None) -> None:
    prof.key = timing_key
    with ResultStore(db) as s:
        save_profile(s.conn, point_key, timing_key, prof,
                     LIMITS.model_dump() if limits is None else limits)


def _rows() -> dict[str, dict[str, Any]]:
    return {
        "direct": row(algorithm="direct", ms=0.7, timing_key="t-direct"),
        "gemm": row(algorithm="gemm", ms=0.9, timing_key="t-gemm"),
        "csr": row(compression="weight_pruning", algorithm="direct_csr", ms=0.45,
                   sparsity=0.75, timing_key="t-csr"),
        "unprofiled": row(compression="weight_pruning", algorithm="gemm_csr", ms=0.5,
                          sparsity=0.75, timing_key="t-unprofiled"),
        "stale": row(algorithm="spatial_pack", ms=0.8, timing_key="t-new"),
        "ort": row(algorithm="direct", tuning="onnxruntime", backend="onnxruntime",
                   ms=0.6, timing_key="t-ort"),
    }


@pytest.fixture
def profiled_db(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]]]:
    rows = _rows()
    db = make_db(tmp_path / "results.db", list(rows.values()))
    store(db, rows["direct"]["point_key"], "t-direct", dense_direct())
    store(db, rows["gemm"]["point_key"], "t-gemm",
          profile([conv(0, 0, CONV0, 150.0), conv(1, 1, CONV1, 600.0)], 0.9))
    store(db, rows["csr"]["point_key"], "t-csr", pruned_direct_csr())
    # profiled at an earlier timing: the row now reports "t-new"
    store(db, rows["stale"]["point_key"], "t-old",
          profile([conv(0, 0, CONV0, 1.0)], 0.8))
    store(db, rows["ort"]["point_key"], "t-ort",
          profile([conv(0, 0, CONV0, 90.0), conv(1, 1, CONV1, 350.0)], 0.6,
                  runtime="onnxruntime"))
    return db, rows


def _section(md: str) -> str:
    start = md.index("## Where the time goes")
    return md[start:md.index("\n## ", start + 1)]


def test_percent_of_expected_speedup_by_hand(profiled_db: tuple[Path, dict]) -> None:
    db, rows = profiled_db
    points = [point_from_row(r) for r in rows.values()]
    loaded = load_profiles(db, points)
    (pair,) = pair_speedups(loaded.points).pairs
    assert pair.compressed.point.key == rows["csr"]["point_key"]
    assert pair.dense.point.key == rows["direct"]["point_key"]  # direct_csr -> direct
    first, second = pair.layers
    # conv 0: density 1, 100 us dense, 120 us pruned -> 0.833x of 1x
    assert (first.density, first.achieved, first.expected) == pytest.approx((1, 100 / 120, 1))
    assert first.percent == pytest.approx(83.333, abs=1e-3)
    # conv 1: 1152 / 4608 = 25% -> 4x expected; 400 / (150 + 50) = 2x achieved -> 50%
    assert (second.density, second.achieved, second.expected) == pytest.approx((0.25, 2, 4))
    assert second.percent == pytest.approx(50.0)
    # overall: ideal 100 + 400 x 0.25 = 200 us over measured 320 us -> 62.5%
    assert pair.achieved == pytest.approx(500 / 320)
    assert pair.expected == pytest.approx(2.5)
    assert pair.percent == pytest.approx(62.5)


def test_report_has_breakdown_roofline_speedup_and_limits(
        profiled_db: tuple[Path, dict], tmp_path: Path) -> None:
    db, rows = profiled_db
    files = build_report(db, tmp_path / "report")
    md, page = files.markdown.read_text(), files.html.read_text()
    assert "Where the time goes" in page
    section = _section(md)
    assert "Per-layer profiles (`dlas profile`) of 4 of the 6 timed points" in section
    assert "1 point(s) have only a profile of an earlier timing" in section
    # the breakdown: same numbers as the bars, empty kinds not printed
    assert ("| point | latency (ms) | layers sum (ms) | conv2d (ms) | dense (ms) | pool (ms) "
            "| layout (ms) | outside the layers (ms) |") in section
    assert "| Dense / direct / untuned | 0.700 | 0.600 | 0.500 | 0.020 | 0.050 | 0.030 | " \
           "0.100 |" in section
    assert "| Dense / ONNX Runtime | 0.600 | 0.440 | 0.440 | 0.000 | 0.000 | 0.000 | 0.160 |" \
        in section
    # the per-layer speedup table, its overall row
    assert "| WP / direct_csr / untuned vs Dense / direct / untuned | conv 0 | 3->16 3x3 " \
           "@32x32 | 100.0% | 100.0 | 120.0 | 0.83x | 1.00x | 83.3% |" in section
    assert "|  | conv 1 | 16->32 3x3 @32x32 | 25.0% | 400.0 | 200.0 | 2.00x | 4.00x | 50.0% |" \
        in section
    assert "| overall (2 convs) |  | 40.0% | 500.0 | 320.0 | 1.56x | 2.50x | 62.5% |" in section
    # the limits beside the theoretical peak, and bandwidth per level
    assert "| float32 | 200.0 GFLOP/s | 250.0 GFLOP/s | 80% | 3.90 GHz |" in section
    assert "| 2 thread(s), CPUs 0,1, unknown | DRAM | 30.0 | 256 MiB | - |" in section
    # the unprofiled and the stale point are not shown
    assert "gemm_csr" not in section and "spatial_pack" not in section
    names = {p.name for p in files.figures if p.name.startswith("profile-")}
    assert {n.split("-")[1] for n in names} == {"time", "roofline", "speedup"}
    for png in files.figures:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"figures/{png.name}" in md
    csv = next(p for p in files.figures if p.name.startswith("profile-time-"))
    assert "Dense / direct / untuned,0.7,0.6" in csv.with_suffix(".csv").read_text()
    assert page.count("data:image/png;base64,") == len(files.figures)


def _point(**kw: Any) -> ProfiledPoint:
    return ProfiledPoint(point_from_row(row(timing_key="t", **kw)), "t", dense_direct(),
                         LIMITS)


def test_roofline_caps_points_dense_and_baselines_first() -> None:
    dense = [_point(algorithm=a) for a in ("direct", "gemm", "spatial_pack")]
    ort = _point(algorithm="direct", tuning="onnxruntime", backend="onnxruntime")
    rest = [_point(compression="weight_pruning", algorithm="direct_csr", sparsity=0.9),
            _point(compression="weight_pruning", algorithm="gemm_csr", sparsity=0.9),
            _point(algorithm="direct", tuning="ansor"),
            _point(compression="float16", algorithm="gemm", tuning="ansor")]
    chosen = select_roofline_points(rest + [ort] + dense)
    assert len(chosen.shown) == MAX_ROOFLINE_POINTS and len(chosen.left_out) == 2
    assert all(p in chosen.shown for p in [*dense, ort])
    # then the most different: float16 tuned adds a compression and a tuning
    assert rest[3] in chosen.shown


def test_roofline_caption_names_the_points_left_out(tmp_path: Path) -> None:
    algs = ["direct", "gemm", "spatial_pack", "direct_csr", "gemm_csr", "spatial_pack_csr",
            "winograd"]
    rows = [row(algorithm=a, timing_key=f"t{i}") for i, a in enumerate(algs)]
    db = make_db(tmp_path / "r.db", rows)
    for i, r in enumerate(rows):
        store(db, r["point_key"], f"t{i}", dense_direct())
    md = build_report(db, tmp_path / "out").markdown.read_text()
    assert "left out (at most 6 points per chart): Dense / winograd / untuned" in md


def test_no_profiles_no_section_and_the_database_is_left_as_it_was(tmp_path: Path) -> None:
    db = make_db(tmp_path / "r.db", list(_rows().values()))
    files = build_report(db, tmp_path / "out")
    assert "Where the time goes" not in files.markdown.read_text()
    assert not any(p.name.startswith("profile-") for p in files.figures)
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "layer_profiles" not in tables


def test_only_stale_profiles_give_no_section(tmp_path: Path) -> None:
    rows = _rows()
    db = make_db(tmp_path / "r.db", list(rows.values()))
    store(db, rows["direct"]["point_key"], "t-earlier", dense_direct(), limits=None)
    assert "Where the time goes" not in build_report(db, tmp_path / "o").markdown.read_text()
