"""The same-work check (`dlas.results.same_work`): one dense kernel on two weight sets of
one shape must read the same; the summary flags a pair that differs beyond its intervals
(the Zen 3 sweep's 13-17%), and says so when they agree."""

from __future__ import annotations

from dlas.results import same_work
from dlas.results.row import ResultRow
from dlas.runner.summary import study_lines

PRUNED = "weight_pruning(level=0.9,levels=[0.9])"


def row(n: int, algorithm: str, compression: str, ms: float, *, rel: float = 0.02,
        placement: str = "near", **kw: object) -> ResultRow:
    fields: dict = dict(point_key=f"p{n}", dataset="digits", model="resnet18(width=0.5)",
                        compression=compression, algorithm=algorithm, tuning="none",
                        target="host", backend="tvm", weight_format="dense",
                        precision="float32", params=1000, macs=5000, accuracy=0.9,
                        latency_median_ms=ms, latency_ci_low_ms=ms * (1 - rel),
                        latency_ci_high_ms=ms * (1 + rel), placement=placement)
    fields.update(kw)
    return ResultRow(**fields)


def test_the_zen3_table_is_flagged_worst_first() -> None:
    rows = [row(1, "direct(layout=NCHWc)", "none", 2.29),
            row(2, "direct(layout=NCHWc)", PRUNED, 1.92),
            row(3, "spatial_pack(layout=NCHWc)", "none", 1.93),
            row(4, "spatial_pack(layout=NCHWc)", PRUNED, 2.18),
            row(5, "gemm", "none", 3.00), row(6, "gemm", PRUNED, 3.03)]
    found = same_work.pairs(rows)
    assert len(found) == 3 and sum(p.disagrees for p in found) == 2
    text = " ".join(same_work.lines(found, 100))
    assert text.startswith("same work reads differently: 2 of 3")
    assert "up to 19.3%" in text and text.index("direct(") < text.index("spatial_pack(")
    summary = study_lines(rows)
    assert any(line.startswith("same work reads differently") for line in summary)
    assert all(len(line) <= 100 for line in summary)


def test_agreeing_pairs_say_so_in_one_line() -> None:
    rows = [row(1, "gemm", "none", 3.00), row(2, "gemm", PRUNED, 3.03)]
    (line,) = same_work.lines(same_work.pairs(rows), 100)
    assert line.startswith("same work: 1 dense kernel(s)") and "1.0% apart" in line


def test_only_the_same_work_is_paired() -> None:
    """Not CSR kernels, not tuned ones (two searches), not other shapes (channel pruning)
    or precisions (float16), not two placements with nothing in common."""
    rows = [row(1, "direct", "none", 2.0),
            row(2, "direct_csr", PRUNED, 1.0, weight_format="csr"),
            row(3, "direct", "none", 1.5, tuning="metaschedule(trials=8)"),
            row(4, "direct", PRUNED, 1.4, tuning="metaschedule(trials=8)"),
            row(5, "direct", "channel_pruning(level=0.5)", 1.0, params=500, macs=2500),
            row(6, "direct", "float16", 1.2, precision="float16")]
    assert same_work.pairs(rows) == []
    far = [row(1, "gemm", "none", 3.0), row(2, "gemm", PRUNED, 2.0, placement="far")]
    (pair,) = same_work.pairs(far)
    assert pair.apart is None and same_work.lines([pair], 100) == []


def test_baselines_are_dense_kernels_too() -> None:
    rows = [row(1, "onnxruntime", "none", 1.5, backend="onnxruntime", tuning="onnxruntime"),
            row(2, "onnxruntime", PRUNED, 1.2, backend="onnxruntime", tuning="onnxruntime")]
    (pair,) = same_work.pairs(rows)
    assert pair.disagrees


def test_the_report_has_a_same_work_section(tmp_path) -> None:  # noqa: ANN001
    """Points without timing histories compare by their intervals: 2.29 [2.24, 2.34]
    against 1.92 [1.88, 1.96] differ; gemm's 3.00 and 3.03 agree."""
    from dlas.report import build_report
    from tests.test_report import make_db
    from tests.test_report import row as report_row

    def timed(ms: float, **kw: object) -> dict:
        return report_row(ms=ms, latency_ci_low_ms=ms * 0.98, latency_ci_high_ms=ms * 1.02,
                          next_run_drift=0.0, **kw)

    rows = [timed(2.29), timed(1.92, compression="weight_pruning", sparsity=0.9),
            timed(3.00, algorithm="gemm"),
            timed(3.03, algorithm="gemm", compression="weight_pruning", sparsity=0.9),
            timed(1.00, algorithm="direct_csr", compression="weight_pruning", sparsity=0.9)]
    db = make_db(tmp_path / "r.db", rows)
    files = build_report(db, tmp_path / "report")
    text = files.markdown.read_text() if hasattr(files, "markdown") else \
        (tmp_path / "report" / "report.md").read_text()
    section = text.split("Same work, two weight sets")[1]
    assert "1 of 2 such pairs differ beyond their interval" in section
    assert "differ: 0.838x" in section and "agree: 1.010x" in section
    assert "direct_csr" not in section.split("Pairs")[1].split("\n#")[0]
