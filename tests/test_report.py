"""The report's logic on small hand-built results databases: fastest selection, the
expected-speedup arithmetic, paper comparison, observations, and the written files."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from dlas.cli import main
from dlas.report import build_report
from dlas.report.data import derive_ratio, latest_per_label, load_points
from dlas.report.data import point_from_row as _point_from_row
from dlas.report.experiments import load_experiment
from dlas.report.observations import (
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    Analysis,
    float16_negligible_int8_loses_accuracy,
    observations,
    pruned_lower_relative_speedup_when_tuned,
    pruning_rarely_reaches_expected_speedup,
    spatial_pack_best_on_tuned_cpu,
    spearman,
    to_roman,
    tuning_accelerates_and_changes_best_choice,
)
from dlas.report.paper import load_paper
from dlas.report.speedup import averages, percent_of_expected, speedup_cells
from dlas.report.tables import (
    compare_algorithm,
    compare_overall,
    fastest_algorithm,
    fastest_compression,
    overall_fastest,
    speed_cells,
    speed_tables,
)
from dlas.results.store import COLUMNS, ResultRow, ResultStore

_keys = itertools.count()
XEON = {"cpu": {"model": "Test Xeon", "flags": ["avx512f", "avx512_vnni", "sse2"], "cores": 2,
                "mcpu": "cascadelake", "mcpu_source": "llvm", "arch": "x86_64"},
        "machine": "x86_64", "cpu_count": 2, "versions": {"apache-tvm": "0.27.0"},
        "platform": "Linux", "python": "3.11", "git_commit": "abc"}


def row(model: str = "resnet18", compression: str = "none", algorithm: str = "direct",
        ms: float | None = 10.0, tuning: str = "none", status: str = "ok",
        accuracy: float | None = 0.9, dense_accuracy: float | None = 0.9,
        sparsity: float = 0.0, params: int = 1_000_000, macs: int = 50_000_000,
        dataset: str = "cifar10", target: str = "host", environment: dict | None = None,
        **extra: Any) -> dict[str, Any]:
    """A results row as the runner writes it (labels are the option names here)."""
    verified = status == "ok"
    return {
        "point_key": f"k{next(_keys)}", "sweep": extra.pop("sweep", "s"), "status": status,
        "dataset": dataset, "model": model, "compression": compression,
        "algorithm": algorithm, "tuning": tuning, "target": target,
        "config": {"choices": {
            "datasets": {"name": dataset}, "models": {"name": model},
            "compression": {"name": compression}, "algorithms": {"name": algorithm},
            "tuning": {"name": tuning}, "targets": {"name": target}}},
        "environment": environment or XEON,
        "accuracy": accuracy, "dense_accuracy": dense_accuracy, "sparsity": sparsity,
        "params": params, "macs": macs, "threads": 2,
        "latency_median_ms": ms if status == "ok" else None,
        "verified": int(verified) if status in ("ok", "verification_failed") else None,
        "max_abs_diff": 1e-6 if verified else (0.5 if status == "verification_failed" else None),
        "top1_agreement": 1.0 if verified else None,
        "error": None if verified else f"{status} on purpose",
        **extra,
    }


def make_db(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Rows through the store; columns this store version lacks (added by newer runners,
    such as `ort_accuracy`) are added to the table and set directly, as a newer DB has."""
    with ResultStore(path) as store:
        for r in rows:
            extra = {k: v for k, v in r.items() if k not in COLUMNS}
            store.upsert(as_row(r))
            existing = {c["name"] for c in store.conn.execute("PRAGMA table_info(points)")}
            for name, value in extra.items():
                if name not in existing:
                    store.conn.execute(f"ALTER TABLE points ADD COLUMN {name}")
                store.conn.execute(f"UPDATE points SET {name} = ? WHERE point_key = ?",
                                   (value, r["point_key"]))
            store.conn.commit()
    return path


def as_row(r: dict[str, Any] | ResultRow) -> ResultRow:
    """A test's row dict as the typed row the store returns (columns only)."""
    if isinstance(r, ResultRow):
        return r
    return ResultRow(**{k: v for k, v in r.items() if k in COLUMNS})


def point_from_row(r: dict[str, Any] | ResultRow):  # noqa: ANN201
    return _point_from_row(as_row(r))


def points_of(rows: list[dict[str, Any]]):  # noqa: ANN201
    return [point_from_row(r) for r in rows]


# -- derived columns ------------------------------------------------------------------------


def test_ratio_is_derived_when_the_column_is_absent() -> None:
    assert derive_ratio("weight_pruning", 0.95, None) == pytest.approx(20.0)
    assert derive_ratio("channel_pruning", None, {"chosen_level": 0.5}) == pytest.approx(2.0)
    assert derive_ratio("float16", None, None) == 2.0
    assert derive_ratio("int8", None, None) == 4.0
    assert derive_ratio("none", None, None) == 1.0
    assert derive_ratio("mystery", None, None) is None
    stored = point_from_row(row(compression="weight_pruning", sparsity=0.5,
                                compression_ratio=7.0))
    assert stored.ratio == 7.0  # the stored column wins over the derivation
    assert point_from_row(row(compression="weight_pruning", sparsity=0.9)).ratio == \
        pytest.approx(10.0)


def test_names_come_from_the_config_not_the_label() -> None:
    r = row(model="resnet18")
    r["model"] = "resnet18(width_multiplier=0.5)"
    p = point_from_row(r)
    assert (p.model, p.model_label) == ("resnet18", "resnet18(width_multiplier=0.5)")
    assert p.platform == "host · Test Xeon" and p.device == "cpu"
    assert point_from_row(row(target="cuda", environment={"gpu": {"model": "H100"}})).platform \
        == "cuda · H100"


# -- fastest selection ----------------------------------------------------------------------


def _cells_rows() -> list[dict[str, Any]]:
    return [
        row(compression="none", algorithm="direct", ms=12.0),
        row(compression="none", algorithm="gemm", ms=10.0),
        row(compression="none", algorithm="spatial_pack", ms=11.0),
        row(compression="weight_pruning", algorithm="direct_csr", ms=6.0, sparsity=0.95),
        row(compression="weight_pruning", algorithm="gemm_csr", ms=4.0, sparsity=0.95),
        row(compression="int8", algorithm="direct", ms=5.0, accuracy_source="tvm",
            ort_accuracy=0.905),
        row(compression="int8", algorithm="gemm", ms=9.0, accuracy_source="tvm",
            ort_accuracy=0.905),
        # the fastest of all, but it computes another function: never a result
        row(compression="int8", algorithm="spatial_pack", ms=0.5, status="verification_failed"),
    ]


def test_fastest_algorithm_compression_and_combination() -> None:
    (models,) = speed_cells(points_of(_cells_rows())).values()
    cells = models["resnet18"]
    assert fastest_algorithm(cells, "none").algorithm == "gemm"
    assert fastest_algorithm(cells, "weight_pruning").algorithm == "gemm_csr"
    assert fastest_algorithm(cells, "int8").algorithm == "direct"  # not the failed 0.5 ms
    assert fastest_algorithm(cells, "float16") is None
    # a family covers its CSR variant: gemm's fastest compression is WP via gemm_csr
    assert fastest_compression(cells, "gemm").compression == "weight_pruning"
    assert fastest_compression(cells, "direct").compression == "int8"
    assert fastest_compression(cells, "spatial_pack").compression == "none"
    best = overall_fastest(cells)
    assert (best.compression, best.algorithm) == ("weight_pruning", "gemm_csr")


def test_duplicate_compression_keeps_the_higher_ratio() -> None:
    rows = [row(compression="none", ms=10.0),
            row(compression="weight_pruning", algorithm="direct_csr", ms=3.0, sparsity=0.5),
            row(compression="weight_pruning", algorithm="direct_csr", ms=5.0, sparsity=0.9)]
    (models,) = speed_cells(points_of(rows)).values()
    assert models["resnet18"][("weight_pruning", "direct_csr")].latency_ms == 5.0


def test_older_rows_of_a_point_give_way_to_the_latest() -> None:
    old = row(ms=5.0, updated_at=1.0)
    new = row(ms=9.0, updated_at=2.0)  # same labels, another key: re-run after a change
    other_sweep = row(ms=1.0, updated_at=0.5, sweep="t")
    kept, superseded = latest_per_label(points_of([old, new, other_sweep]))
    assert [p.latency_ms for p in kept] == [9.0, 1.0] and superseded == 1
    # same compression and ratio under other parameters: the later row is tabulated
    a = row(compression="weight_pruning", algorithm="direct_csr", ms=2.0, sparsity=0.9,
            updated_at=1.0)
    b = row(compression="weight_pruning", algorithm="direct_csr", ms=3.0, sparsity=0.9,
            updated_at=2.0)
    b["compression"] = "weight_pruning(level=0.9)"  # a different label: both stay points
    (models,) = speed_cells(points_of([a, b])).values()
    assert models["resnet18"][("weight_pruning", "direct_csr")].latency_ms == 3.0


def test_tables_compare_with_the_paper_and_mark_differences() -> None:
    paper = load_paper()
    rows = [row(compression="none", algorithm="gemm", ms=10.0),
            row(compression="none", algorithm="direct", ms=12.0),
            row(compression="int8", algorithm="gemm", ms=3.0)]
    (table,) = speed_tables(points_of(rows), paper, {"host": "i7"})
    (r,) = table.rows
    assert r.paper is not None and r.paper.platform == "i7" and r.paper.tuning == "untuned"
    dense = compare_algorithm(r.fastest_algorithm["none"], r.paper.fastest_algorithm["none"],
                              paper)
    assert (dense.ours, dense.paper, dense.differs) == ("gemm", "Direct", True)
    i8 = compare_algorithm(r.fastest_algorithm["int8"], r.paper.fastest_algorithm["int8"],
                           paper)
    assert (i8.paper, i8.differs) == ("GEMM", False)
    overall = compare_overall(r.overall, r.paper.overall, paper)  # paper: i8+GEMM
    assert (overall.ours, overall.differs) == ("i8+gemm", False)
    (plain,) = speed_tables(points_of(rows), paper)  # no platform mapping: no paper row
    assert plain.rows[0].paper is None


# -- expected speedup -------------------------------------------------------------------------


def test_expected_speedup_arithmetic_and_average() -> None:
    rows = _cells_rows() + [
        row(model="vgg16", compression="none", algorithm="direct", ms=8.0),
        row(model="vgg16", compression="weight_pruning", algorithm="direct_csr", ms=2.0,
            sparsity=0.95),
    ]
    cells = {(c.model_label, c.compression): c for c in speedup_cells(points_of(rows))}
    wp = cells[("resnet18", "weight_pruning")]
    # best dense 10 ms (gemm), best WP 4 ms (gemm_csr): 2.5x of the ideal 20x = 12.5%
    assert (wp.dense.algorithm, wp.best.algorithm) == ("gemm", "gemm_csr")
    assert wp.speedup == pytest.approx(2.5) and wp.pct_expected == pytest.approx(12.5)
    i8 = cells[("resnet18", "int8")]
    assert i8.speedup == pytest.approx(2.0) and i8.pct_expected == pytest.approx(50.0)
    assert cells[("vgg16", "weight_pruning")].pct_expected == pytest.approx(20.0)
    avg = {a.compression: a for a in averages(cells.values())}
    assert avg["weight_pruning"].models == 2
    assert avg["weight_pruning"].mean_pct == pytest.approx((12.5 + 20.0) / 2)  # arithmetic
    assert avg["weight_pruning"].geomean_speedup == pytest.approx((2.5 * 4.0) ** 0.5)
    assert percent_of_expected(8.0, 4.0) == 200.0  # above 100% is allowed (int8 on the i7)
    with pytest.raises(ValueError):
        percent_of_expected(2.0, 1.0)


def test_average_carries_the_papers_percentage() -> None:
    rows = [row(compression="none", ms=10.0),
            row(compression="weight_pruning", algorithm="direct_csr", ms=5.0, sparsity=0.95)]
    (avg,) = averages(speedup_cells(points_of(rows)), load_paper(), {"host": "i7"})
    assert avg.paper_pct == 21.8  # Section 5.1.2, i7 untuned weight pruning


# -- observations ---------------------------------------------------------------------------


def test_spearman_and_roman() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # the paper's CIFAR MACs vs top-1: ranks 1,2,3,4 vs 1,3,2,4 -> 0.8
    assert spearman([48, 98, 314, 557], [91.3, 93.2, 92.9, 94.3]) == pytest.approx(0.8)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    assert [to_roman(n) for n in (1, 4, 9, 12, 13)] == ["I", "IV", "IX", "XII", "XIII"]


def _analysis(rows: list[dict[str, Any]]) -> Analysis:
    return Analysis.of(points_of(rows), load_paper())


def _tuned_cpu(spatial_wins: bool) -> list[dict[str, Any]]:
    rows = []
    for model in ("resnet18", "vgg16", "mobilenetv2"):
        rows += [row(model=model, algorithm="direct", ms=5.0, tuning="metaschedule"),
                 row(model=model, algorithm="spatial_pack", ms=4.0 if spatial_wins else 6.0,
                     tuning="metaschedule")]
    return rows


def test_observation_7_held_not_held_and_not_measured() -> None:
    assert spatial_pack_best_on_tuned_cpu(_analysis(_tuned_cpu(True)))[0].status == HELD
    assert spatial_pack_best_on_tuned_cpu(_analysis(_tuned_cpu(False)))[0].status == NOT_HELD
    untuned_only = [row(algorithm="direct"), row(algorithm="spatial_pack", ms=1.0)]
    assert spatial_pack_best_on_tuned_cpu(_analysis(untuned_only))[0].status == NOT_MEASURED


def test_observations_10_11_12_on_tuned_and_untuned_pruning() -> None:
    rows = []
    for tuning, dense_ms, wp_ms in (("none", 100.0, 20.0), ("metaschedule", 10.0, 5.0)):
        for model in ("resnet18", "vgg16"):
            rows += [row(model=model, algorithm="direct", ms=dense_ms, tuning=tuning),
                     row(model=model, algorithm="gemm", ms=dense_ms * 1.5, tuning=tuning),
                     row(model=model, compression="weight_pruning", algorithm="direct_csr",
                         ms=wp_ms, tuning=tuning, sparsity=0.9)]
    a = _analysis(rows)
    # untuned 5x of 10x (50%), tuned 2x of 10x (20%): mean 35% < 50%: rarely as expected
    (x,) = pruning_rarely_reaches_expected_speedup(a)
    assert x.status == HELD and "35.0%" in x.evidence[0]
    accel, change = tuning_accelerates_and_changes_best_choice(a)
    # per model: dense direct and gemm 10x faster tuned, WP 4x: geo-mean (10*10*4)^(1/3)
    # rows without intervals (medians only) still carry the machine's drift (the prior)
    assert accel.status == HELD and "7.37x [" in accel.evidence[0]
    assert "over 6 points" in accel.evidence[0]
    assert change.status == NOT_HELD  # the same algorithm and combination win either way
    (xii,) = pruned_lower_relative_speedup_when_tuned(a)
    assert xii.status == HELD and "50.0% [" in xii.evidence[0]
    assert "untuned, 20.0% [" in xii.evidence[0]


def test_observation_6_float16_and_int8_accuracy() -> None:
    rows = []
    for model in ("resnet18", "vgg16"):
        rows += [row(model=model, accuracy=0.90),
                 row(model=model, compression="float16", accuracy=0.899),
                 row(model=model, compression="int8", accuracy=0.88)]
    f16, i8 = float16_negligible_int8_loses_accuracy(_analysis(rows), load_paper())
    assert f16.status == HELD and "0.10 pp" in f16.evidence[0]
    assert i8.status == HELD and "2.00 pp" in i8.evidence[0] and "paper: 1.8" in i8.evidence[0]
    rows.append(row(model="mobilenetv2", accuracy=0.9))
    rows.append(row(model="mobilenetv2", compression="float16", accuracy=0.80))
    assert float16_negligible_int8_loses_accuracy(_analysis(rows), load_paper())[0].status \
        == NOT_HELD


def test_all_thirteen_report_a_status_and_accuracy_unavailable_is_not_a_number() -> None:
    rows = _cells_rows() + [row(model="vgg16", accuracy=None, dense_accuracy=None)]
    obs = observations(points_of(rows), load_paper())
    assert [o.number for o in obs] == list(range(1, 14))
    assert all(o.claim for o in obs)
    assert {o.status for o in obs} <= {HELD, NOT_HELD, NOT_MEASURED}
    assert obs[12].status == NOT_MEASURED  # one platform only


# -- the written report -----------------------------------------------------------------------


@pytest.fixture
def report_db(tmp_path: Path) -> Path:
    rows = _cells_rows() + [
        row(model="vgg16", compression="none", algorithm="gemm", ms=20.0, params=14_700_000,
            macs=314_000_000, accuracy=0.93),
        row(model="vgg16", compression="weight_pruning", algorithm="gemm_csr", ms=8.0,
            sparsity=0.95, accuracy=0.92,
            compression_info={"levels": [{"level": 0.5, "sparsity": 0.5, "accuracy": 0.93},
                                         {"level": 0.95, "sparsity": 0.95, "accuracy": 0.92}],
                              "chosen_level": 0.95}),
        row(model="vgg16", compression="float16", algorithm="gemm", ms=30.0, accuracy=0.93),
        row(model="vgg16", compression="int8", algorithm="gemm", status="failed", ms=None),
        row(model="vgg16", compression="none", algorithm="direct_csr", status="not_runnable",
            ms=None),
        row(model="mobilenetv2", accuracy=None, dense_accuracy=None),  # no weights here
    ]
    return make_db(tmp_path / "results.db", rows)


def test_report_files_tables_figures_and_verification(report_db: Path, tmp_path: Path) -> None:
    experiment = load_experiment("cifar10_cpu")
    out = tmp_path / "report"
    files = build_report(report_db, out, sweeps=["s"], experiment=experiment, profile="quick")
    md, page = files.markdown.read_text(), files.html.read_text()
    assert files.counts == {"ok": 11, "verification_failed": 1, "failed": 1, "not_runnable": 1}
    for section in ("Table 2", "Table 3", "Expected speedup", "thirteen observations",
                    "Environment", "Verification of every point"):
        assert section in md and section in page
    assert "paper 94.3%" in md  # Table 2, ResNet18 dense top-1 beside ours
    assert "90.0% (75%) [tvm] (ONNX Runtime 90.5%) · paper 93.2% (75%)" in md
    assert "| mobilenetv2 | 1.0M · paper 2.3M | 50.0M · paper 98M | unavailable" in md
    assert "gemm (paper Direct) ≠" in md  # i7 untuned dense: the paper had direct fastest
    assert "0.5 ms" not in md and "0.5 ms" not in page  # the failed-verification timing
    assert "verification_failed" in md and "5.00e-01" in md  # ... listed in verification
    assert "Test Xeon" in md and "avx512_vnni" in md
    assert {p.name for p in files.figures} == {"accuracy-cifar10.png",
                                               "inference-cifar10-cpu.png"}
    for png in files.figures:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert f"figures/{png.name}" in md
    assert page.count("data:image/png;base64,") == 2 and "src='figures/" not in page


def test_report_marks_a_stand_in_dataset(tmp_path: Path) -> None:
    db = make_db(tmp_path / "r.db", [row(dataset="digits"), row(dataset="digits",
                                                               algorithm="gemm", ms=3.0)])
    md = build_report(db, tmp_path / "out").markdown.read_text()
    assert "STAND-IN DATASET" in md and "digits" in md
    assert "instead of 32x32" not in md  # CIFAR's 32x32: the stand-in's own sentence holds


def test_report_says_a_resized_stand_in_is_not_the_papers_work(tmp_path: Path) -> None:
    """The quickstart's digits at 16x16: the stand-in sentence ("the input shape ... is
    the same as CIFAR-10's") is followed by what this sweep ran instead."""
    small = row(dataset="digits")
    small["config"]["choices"]["datasets"]["params"] = {"image_size": 16}
    db = make_db(tmp_path / "r.db", [small, row(dataset="digits", algorithm="gemm")])
    md = build_report(db, tmp_path / "out").markdown.read_text()
    assert "digits was upsampled to 16x16 instead of 32x32" in md
    assert "not with the paper's" in md


def test_cli_report_and_errors(report_db: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture) -> None:
    ws = report_db.parent
    assert main(["report", "--workspace", str(ws), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "o" / "report.html") in out and "report.md" in out
    assert main(["report", "--workspace", str(ws), "--experiment", "cifar10"]) == 2
    out = capsys.readouterr().out
    assert "unknown experiment 'cifar10'" in out and "cifar10_cpu" in out
    assert main(["report", "--workspace", str(ws), "--sweep", "quickstart"]) == 2
    out = capsys.readouterr().out
    assert "no sweep 'quickstart'" in out and "its sweeps: s" in out
    assert main(["report", "--workspace", str(tmp_path / "nowhere")]) == 1
    assert "no results database" in capsys.readouterr().out


def test_load_points_filters_sweeps_and_reports_keep_the_current_points(
        report_db: Path, tmp_path: Path) -> None:
    points = load_points(report_db, ["s"])
    assert len(points) == 14 and load_points(report_db, ["other"]) == []
    keep = {p.key for p in points if p.model == "resnet18"}
    files = build_report(report_db, tmp_path / "r", point_keys=keep)
    assert sum(files.counts.values()) == len(keep) == 8
    assert "6 older rows of these sweeps" in files.markdown.read_text()



def test_figures_and_tables_show_the_iqr_of_the_raw_samples(tmp_path: Path) -> None:
    steady = [10.0, 10.0, 10.0, 10.0, 10.0]
    spread = [4.0, 5.0, 6.0, 9.0, 30.0]  # median 6, Q1 5, Q3 9: a skewed, busy-looking set
    rows = [row(ms=10.0, latency_samples_ms=steady),
            row(algorithm="gemm", ms=6.0, latency_samples_ms=spread, noisy=1,
                noise_reason="5 of 5 samples taken on a busy machine; retry budget spent"),
            row(algorithm="spatial_pack", ms=8.0, latency_q1_ms=7.0, latency_q3_ms=8.5),
            row(compression="int8", ms=3.0, accuracy=0.89)]  # an old row: no spread known
    db = make_db(tmp_path / "r.db", rows)
    points = load_points(db)
    gemm = next(p for p in points if p.algorithm == "gemm")
    assert (gemm.latency_q1_ms, gemm.latency_q3_ms, gemm.latency_iqr_ms) == (5.0, 9.0, 4.0)

    from dlas.report.figures import inference_figure, inference_panels

    panels = inference_panels(points, "cifar10", "cpu")
    bars = {(b.compression, b.algorithm): b for b in panels.bars}
    assert bars[("none", "gemm")].whisker() == (1.0, 3.0)  # median to Q1, median to Q3
    assert bars[("none", "gemm")].noisy and not bars[("none", "direct")].noisy
    assert bars[("none", "direct")].iqr_ms == 0.0
    assert bars[("none", "spatial_pack")].whisker() == (1.0, 0.5)  # from the stored columns
    assert bars[("int8", "direct")].iqr_ms is None and bars[("int8", "direct")].whisker() == (
        0.0, 0.0)

    png = inference_figure(points, "cifar10", "cpu", tmp_path / "fig" / "inference.png")
    assert png is not None and png.exists()
    import csv

    with open(png.with_suffix(".csv")) as fh:
        plotted = {(r["compression"], r["algorithm"]): r for r in csv.DictReader(fh)}
    assert float(plotted[("none", "gemm")]["iqr_ms"]) == 4.0
    assert plotted[("none", "gemm")]["noisy"] == "1"

    files = build_report(db, tmp_path / "report", sweeps=["s"])
    md = files.markdown.read_text()
    assert "6 ms (IQR 5-9)" in md  # the fastest cell prints the spread beside the median
    assert "whiskers span the interquartile range" in md
    assert "flagged noisy" in md and "1 of them" in md


def test_the_rows_facts_win_over_guesses_from_option_names() -> None:
    """Rows record backend, device kind and weight format; the report reads them, and
    guesses from option names only for rows written before they were recorded."""
    plugin = point_from_row(row(algorithm="my_sparse_conv", tuning="my_runtime",
                                target="my_board", backend="my_runtime",
                                device_kind="gpu", weight_format="csr"))
    assert (plugin.sparse, plugin.baseline, plugin.device) == (True, True, "gpu")
    old = point_from_row(row(algorithm="gemm_csr", tuning="onnxruntime"))
    assert (old.sparse, old.baseline, old.device) == (True, True, "cpu")
    dense = point_from_row(row(algorithm="gemm_csr", backend="tvm", weight_format="dense",
                               device_kind="cpu"))
    assert (dense.sparse, dense.baseline) == (False, False)


def test_rows_timed_as_another_cpu_say_so_in_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under DLAS_CPUINFO the row's `cpu` describes the saved CPU; the environment keeps
    the silicon that timed it, the timing fingerprint differs, and the report says both."""
    from dlas.results import environment as envmod
    from dlas.targets.host import machine_cpuinfo_fields

    monkeypatch.delenv("DLAS_CPUINFO", raising=False)  # the plain run first
    assert "cpuinfo_as" not in envmod.capture_environment()
    plain = envmod.machine_fingerprint()
    monkeypatch.setenv("DLAS_CPUINFO", "zen1")
    env = envmod.capture_environment()
    forced_fingerprint = envmod.machine_fingerprint()
    monkeypatch.delenv("DLAS_CPUINFO")
    assert envmod.machine_fingerprint() == plain
    saved = env["cpuinfo_as"]
    assert saved["setting"] == "zen1" and saved["file"].endswith("zen1.txt")
    assert saved["silicon"]["model_number"] == machine_cpuinfo_fields().get("model")
    assert forced_fingerprint["cpuinfo_as"] == "zen1" and "cpuinfo_as" not in plain
    db = make_db(tmp_path / "r.db", [row(environment={**XEON, "cpuinfo_as": {
        "setting": "zen3", "file": "x/zen3.txt", "silicon": {
            "vendor": "AuthenticAMD", "model": "AMD EPYC", "family": "25",
            "model_number": "17", "flags": ["fpu", "avx2", "avx512f"]}}})])
    md = build_report(db, tmp_path / "report").markdown.read_text()
    assert "CPU flags read from DLAS_CPUINFO=zen3" in md
    assert "family 25 model 17, SIMD avx2 avx512f" in md and "do not read them as" in md
