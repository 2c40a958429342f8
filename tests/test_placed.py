"""No ratio across placements, none that outruns its intervals (`dlas.results.placed`), and
the run's summary built on it: rows made to disagree, as the Zen 3 quickstart's did (a TVM
row near divided by an ONNX Runtime row far read "1.48x faster"; both near: slower)."""

from __future__ import annotations

from dlas.results import placed
from dlas.results.row import ResultRow
from dlas.runner.summary import study_lines

MODEL = "mobilenetv2(width_multiplier=0.5)"


def fig(ms: float, rel: float = 0.01) -> dict[str, float]:
    return {"median_ms": ms, "ci_low_ms": ms * (1 - rel), "ci_high_ms": ms * (1 + rel),
            "samples": 100, "rounds": 4, "runs": 3}


def row(n: int, algorithm: str, headline: str, by: dict[str, dict[str, float]], *,
        tuning: str = "none") -> ResultRow:
    """A row whose headline is its figures in `headline`, with `by` in every placement."""
    backend = tuning if tuning in ("onnxruntime", "pytorch") else "tvm"
    h = by[headline]
    return ResultRow(point_key=f"p{n}", dataset="digits", model=MODEL, compression="none",
                     algorithm=algorithm, tuning=tuning, target="host", backend=backend,
                     accuracy=0.97, latency_median_ms=h["median_ms"],
                     latency_ci_low_ms=h["ci_low_ms"], latency_ci_high_ms=h["ci_high_ms"],
                     placement=headline, latency_by_placement=by)


def test_a_near_row_is_never_divided_by_a_far_one() -> None:
    """The quickstart's case: TVM's headline near 0.761, ORT's far 1.128; both near, ORT
    reads 0.505. The ratio is the near one: TVM slower, not 1.48x faster."""
    tvm = row(1, "direct", "near", {"near": fig(0.761), "far": fig(1.30)})
    ort = row(2, "onnxruntime", "far", {"near": fig(0.505), "far": fig(1.128)},
              tuning="onnxruntime")
    rel = placed.relate(tvm, ort)
    assert rel.placement == "near" and rel.verdict == "b_faster"
    assert abs(rel.ratio - 0.505 / 0.761) < 1e-9
    assert rel.text() == f"{0.761 / 0.505:.2f}x slower"
    text = "\n".join(study_lines([tvm, ort]))
    assert "1.51x slower" in text and "faster" not in text.split("vs ONNX RT:")[0]


def test_overlapping_intervals_say_tie_with_the_ratio_beside() -> None:
    """The ResNet18 line: 1.898 [1.83, 2.19] against 2.291 [2.14, 2.37] is a tie."""
    tvm = row(1, "direct", "near", {"near": {"median_ms": 1.898, "ci_low_ms": 1.83,
                                             "ci_high_ms": 2.19}})
    ort = row(2, "onnxruntime", "near", {"near": {"median_ms": 2.291, "ci_low_ms": 2.14,
                                                  "ci_high_ms": 2.37}}, tuning="onnxruntime")
    rel = placed.relate(tvm, ort)
    assert rel.verdict == "tie" and rel.text() == "tie (1.21x)"
    assert "tie (1.21x)" in "\n".join(study_lines([tvm, ort]))


def test_rows_with_no_placement_in_common_are_not_compared() -> None:
    tvm = row(1, "direct", "near", {"near": fig(0.7)})
    ort = row(2, "onnxruntime", "far", {"far": fig(1.1)}, tuning="onnxruntime")
    rel = placed.relate(tvm, ort)
    assert rel.verdict == "incomparable" and rel.ratio is None
    lines = study_lines([tvm, ort])
    assert "not comparable" in "\n".join(lines)
    assert "no placement in common" in " ".join(lines)


def test_a_single_cpu_row_compares_with_any_placement() -> None:
    one = row(1, "direct", "single", {"single": fig(2.0)})
    far = row(2, "onnxruntime", "far", {"far": fig(1.0)}, tuning="onnxruntime")
    rel = placed.relate(one, far)
    assert rel.verdict == "b_faster" and rel.placement == "far" and rel.ratio == 0.5


def test_rows_without_intervals_or_a_probe_compare_by_their_medians_said_so() -> None:
    a = ResultRow(point_key="a", latency_median_ms=2.0)
    b = ResultRow(point_key="b", latency_median_ms=3.0)
    rel = placed.relate(a, b)
    assert rel.verdict == "a_faster" and rel.medians_only and rel.placement is None


def test_the_fastest_variant_is_ranked_in_one_placement() -> None:
    """gemm's far headline (0.9) is not faster than direct's near one (1.0): both near,
    direct is. A row timed only where the others were not is left out of the ranking."""
    direct = row(1, "direct", "near", {"near": fig(1.0), "far": fig(1.4)})
    gemm = row(2, "gemm", "far", {"near": fig(1.2), "far": fig(0.9)})
    spatial = row(3, "spatial_pack", "near", {"near": fig(1.1)})
    lone = row(4, "winograd", "erratic", {"erratic": fig(0.3)})
    best, figure = placed.fastest([direct, gemm, spatial, lone])
    assert best is direct and figure.placement == "near" and figure.median_ms == 1.0
    lines = study_lines([gemm, direct, spatial])
    body = next(line for line in lines if line.startswith("mobilenetv2"))
    assert "direct" in body and "1.000" in body


def test_tuning_gain_is_read_in_one_placement() -> None:
    """Untuned far 2.0, tuned near 1.0: a cross-placement 2.00x. In near both, 1.25x."""
    untuned = row(1, "gemm", "far", {"near": fig(1.25), "far": fig(2.0)})
    tuned = row(2, "gemm", "near", {"near": fig(1.0)}, tuning="metaschedule(trials=8)")
    lines = "\n".join(study_lines([untuned, tuned]))
    assert "gemm 1.25x" in lines and "2.00x" not in lines


# -- the report's speedups --------------------------------------------------------------------


def _timed_point(ms_by_placement: dict[str, float], run_id: str, **kw: object):  # noqa: ANN202
    """A report point with a timing history: 4 rounds of 5 samples in each placement."""
    from dataclasses import replace

    from dlas.measure.record import TimingRound, TimingRun
    from tests.test_report import point_from_row, row

    runs = tuple(TimingRun(run_id=f"{run_id}-{state}", started_at=1.0, placement=state,
                           rounds=[TimingRound(index=j, placement=state,
                                               samples_ms=[ms * (1 + 0.001 * k)
                                                           for k in range(5)])
                                   for j in range(4)])
                 for state, ms in ms_by_placement.items())
    head = next(iter(ms_by_placement.values()))
    return replace(point_from_row(row(ms=head, latency_ci_low_ms=head * 0.99,
                                      latency_ci_high_ms=head * 1.01, next_run_drift=0.0,
                                      **kw)), runs=runs)


def test_the_reports_speedup_is_read_in_one_placement() -> None:
    """Dense: near 10 ms (its headline), far 16. Pruned: timed far only, 8 ms. The
    headlines' 1.25x divides near by far; both far, the speedup is 2.00x."""
    from dlas.report.speedup import speedup_cells

    dense = _timed_point({"near": 10.0, "far": 16.0}, "d")
    pruned = _timed_point({"far": 8.0}, "p", compression="weight_pruning",
                          algorithm="direct_csr", sparsity=0.9)
    (cell,) = speedup_cells([dense, pruned])
    assert cell.speedup is not None and abs(cell.speedup - 2.0) < 0.01
    assert cell.speedup_text == "2.00x" and abs(cell.pct_expected - 20.0) < 0.1
    lone = _timed_point({"near": 8.0}, "q", compression="weight_pruning",
                        algorithm="direct_csr", sparsity=0.9)
    only_far = _timed_point({"far": 16.0}, "e")
    (cell,) = speedup_cells([only_far, lone])
    assert cell.speedup is None and cell.pct_expected is None
    assert cell.speedup_text == "not comparable"


def test_the_reports_fastest_choice_is_ranked_in_one_placement() -> None:
    """direct: near 10 (its headline), far 16; gemm: near 12, far 9 (its headline). The
    headlines call gemm fastest (9 < 10), across placements; both have near rounds, the
    preferred placement, where direct is."""
    from dlas.report.comparisons import ranked
    from dlas.report.tables import _fastest, fastest_layout

    direct = _timed_point({"near": 10.0, "far": 16.0}, "a")
    gemm = _timed_point({"far": 9.0, "near": 12.0}, "b", algorithm="gemm")
    assert gemm.latency_ms == 9.0 and direct.latency_ms == 10.0
    assert _fastest([gemm, direct]) is direct
    assert dict((p.algorithm, round(v, 1)) for p, v in ranked([direct, gemm])) == \
        {"direct": 10.0, "gemm": 12.0}
    assert fastest_layout({"NCHW": gemm, "NCHW16c": direct}) is direct
    lone = _timed_point({"erratic": 1.0}, "c", algorithm="spatial_pack")
    assert _fastest([direct, gemm, lone]) is direct  # not comparable: not ranked


def test_points_with_no_undisturbed_round_rank_by_their_headlines() -> None:
    """Every round mixed (no placement to rank in): the headlines, as before, not none."""
    from dlas.report.tables import _fastest

    a = _timed_point({"mixed": 2.0}, "m1")
    b = _timed_point({"mixed": 3.0}, "m2", algorithm="gemm")
    assert _fastest([b, a]) is a


def test_a_figure_of_one_round_decides_nothing() -> None:
    """One round gives an interval of no width: two rows read far in one round each
    (6.55 [6.55, 6.55] against 1.92 [1.92, 1.92]) tie; and where the rows share a
    placement with two rounds or more each, they are compared there, not in a preferred
    one where a row has a single round."""
    def one(ms: float) -> dict[str, float]:
        return {**fig(ms, rel=0.0), "rounds": 1}

    a = row(1, "onnxruntime", "far", {"far": one(6.55)}, tuning="onnxruntime")
    b = row(2, "onnxruntime", "far", {"far": one(1.92)}, tuning="onnxruntime")
    rel = placed.relate(a, b)
    assert rel.verdict == "tie" and rel.text() == f"tie ({6.55 / 1.92:.2f}x)"
    near_once = row(3, "direct", "far", {"near": one(1.0), "far": fig(1.5)})
    near_often = row(4, "gemm", "near", {"near": fig(2.0), "far": fig(3.0)})
    rel = placed.relate(near_once, near_often)
    assert rel.placement == "far" and rel.verdict == "a_faster"
    assert rel.ratio == 3.0 / 1.5
    # rows older than the round count (no "rounds") decide as before
    old = row(5, "direct", "near", {"near": {"median_ms": 1.0, "ci_low_ms": 0.99,
                                             "ci_high_ms": 1.01}})
    assert placed.relate(old, near_often).verdict == "a_faster"


def test_the_report_compares_in_a_placement_where_both_have_rounds_to_spare() -> None:
    from dlas.report.comparisons import common_placement

    assert common_placement({"near": 1, "far": 6}, {"near": 5, "far": 4}) == ("far", "far")
    assert common_placement({"near": 3, "far": 6}, {"near": 5, "far": 4}) == ("near", "near")
    # nowhere enough: the preferred shared one (its comparison then ties)
    assert common_placement({"near": 1, "far": 1}, {"near": 1}) == ("near", "near")
    assert common_placement({"near": 4}, {"far": 4}) is None
    assert common_placement({"single": 4}, {"near": 1, "far": 3}) == ("single", "far")
