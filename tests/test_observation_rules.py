"""The observation rules on small synthetic studies: a tie within the timings' 95%
intervals is reported as a tie (not as held or not held), a threshold on a statistic is
decided on its interval, `combine` with tie parts, what a not-measured part needs, and
the report's table with the paper's verdict beside ours.

Points carry stored intervals and no timing history, so comparisons use the intervals'
ends (`dlas.report.comparisons`): intervals that separate decide, ones that overlap tie.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dlas.report import build_report
from dlas.report.comparisons import (
    Statistic,
    above,
    at_least,
    compare_points,
    drift_of,
    geomean_interval,
    mean_interval,
    speedup_interval,
)
from dlas.report.observations import (
    HELD,
    NOT_HELD,
    NOT_MEASURED,
    TIE,
    TIE_NEEDS,
    Analysis,
    Part,
    combine,
    observations,
    pruned_lower_relative_speedup_when_tuned,
    pruning_rarely_reaches_expected_speedup,
    sparse_gemm_best_on_cpu_direct_on_gpu,
    spatial_pack_best_on_tuned_cpu,
    tuned_sparse_faster_than_dense_on_cifar10_not_imagenet,
    tuning_accelerates_and_changes_best_choice,
)
from dlas.report.paper import load_paper
from dlas.results.drift import PRIOR
from tests.test_report import make_db, point_from_row, points_of, row

TUNED = "metaschedule"


def timed(ms: float, half: float, **kw: Any) -> dict[str, Any]:
    """A row timed at `ms` with a 95% interval of +-`half`."""
    return row(ms=ms, latency_ci_low_ms=ms - half, latency_ci_high_ms=ms + half, **kw)


def analysis(rows: list[dict[str, Any]]) -> Analysis:
    return Analysis.of(points_of(rows), load_paper())


# -- intervals ------------------------------------------------------------------------------


def test_interval_arithmetic_and_thresholds() -> None:
    # no drift on this machine: the ratio's interval comes from the two intervals alone
    dense = point_from_row(timed(100.0, 1.0, next_run_drift=0.0))
    pruned = point_from_row(timed(20.0, 1.0, compression="weight_pruning",
                                  algorithm="direct_csr", sparsity=0.9, next_run_drift=0.0))
    s = speedup_interval(dense, pruned)  # 100/20, from the ends: 99/21 .. 101/19
    assert (s.value, s.low, s.high) == pytest.approx((5.0, 99 / 21, 101 / 19))
    m = mean_interval([Statistic(1, 0.5, 2), Statistic(3, 2, 4)])
    assert (m.value, m.low, m.high) == (2, 1.25, 3)
    g = geomean_interval([Statistic(2, 1, 4), Statistic(8, 4, 16)])
    assert (g.value, g.low, g.high) == pytest.approx((4, 2, 8))
    assert geomean_interval([Statistic(2, 0, 4), Statistic(2, 1, float("inf"))]).low == 0
    assert [at_least(Statistic(2, lo, hi), 2.0) for lo, hi in ((2, 3), (1, 1.9), (1.9, 2.1))] \
        == [True, False, None]
    assert [above(Statistic(.5, lo, hi), .5) for lo, hi in ((.6, .7), (.4, .5), (.5, .6))] \
        == [True, False, None]
    assert Statistic.exact(2.0).text(unit="x") == "2.00x"
    assert Statistic(2.0, 1.5, 2.5).text(unit="x") == "2.00x [1.50, 2.50]"


def test_points_timed_apart_compare_with_both_runtimes_drift() -> None:
    """Rows of other timing runs (here: rows without shared rounds) differ also by the
    machine's drift between the runs: their ratio's interval gains it in quadrature, so
    a 3% difference with 1% intervals is a tie once TVM drifts 10% on this machine."""
    a = point_from_row(timed(100.0, 0.5, next_run_drift=0.10))
    b = point_from_row(timed(103.0, 0.5, algorithm="gemm", next_run_drift=0.10))
    c = compare_points(a, b)
    assert c.verdict == "tie" and "across runs" in (c.placement or "")
    assert c.low < 103 / 100 * math.exp(-0.09) and c.high > 103 / 100 * math.exp(0.09)
    still = compare_points(point_from_row(timed(100.0, 0.5, next_run_drift=0.0)),
                           point_from_row(timed(103.0, 0.5, algorithm="gemm",
                                                next_run_drift=0.0)))
    assert still.verdict == "b_faster" or still.verdict == "a_faster"
    # a row older than the record: its runtime's prior
    old = point_from_row(timed(100.0, 0.5))
    assert drift_of(old) == PRIOR["tvm"]


# -- combine ---------------------------------------------------------------------------------


def _parts(*statuses: str) -> list[Part]:
    return [Part(f"p{i}", s) for i, s in enumerate(statuses)]


@pytest.mark.parametrize(("statuses", "status", "partial", "label"), [
    ((HELD, TIE), HELD, False, "held (1 part(s) a tie)"),
    ((TIE, TIE), TIE, False, "tie"),
    ((TIE, NOT_HELD, HELD), NOT_HELD, False, "not held (1 part(s) a tie)"),
    ((TIE, NOT_MEASURED), TIE, True, "tie (partly measured)"),
    ((HELD, NOT_MEASURED), HELD, True, "held (partly measured)"),
    ((NOT_MEASURED, NOT_MEASURED), NOT_MEASURED, False, "not measured"),
])
def test_combine_with_tie_parts(statuses: tuple[str, ...], status: str, partial: bool,
                                label: str) -> None:
    o = combine(1, "claim", _parts(*statuses))
    assert (o.status, o.partial, o.status_label) == (status, partial, label)
    # a tie part says what would narrow it
    assert all(p.needs == TIE_NEEDS for p in o.parts if p.status == TIE)


# -- II: tuned pruned vs dense ----------------------------------------------------------------


def _tuned_pruning(dataset: str, pruned: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Per model: a tuned dense point at 10 +- 0.1 ms and a pruned one at (ms, half)."""
    rows = []
    for model, (ms, half) in zip(("resnet18", "vgg16", "mobilenetv2"), pruned, strict=False):
        rows += [timed(10.0, 0.1, model=model, tuning=TUNED, dataset=dataset),
                 timed(ms, half, model=model, tuning=TUNED, dataset=dataset,
                       compression="weight_pruning", algorithm="direct_csr", sparsity=0.9)]
    return rows


@pytest.mark.parametrize(("pruned", "status"), [
    ([(5.0, 0.1)] * 3, HELD),                              # decidedly faster everywhere
    ([(9.95, 0.2)] * 3, TIE),                              # every case a tie
    ([(5.0, 0.1), (5.0, 0.1), (9.95, 0.2)], HELD),         # 67%-100% > 50%
    ([(5.0, 0.1), (20.0, 0.1), (9.95, 0.2)], TIE),         # 33%-67% spans 50%
    ([(20.0, 0.1), (20.0, 0.1), (9.95, 0.2)], NOT_HELD),   # 0%-33%
])
def test_obs_2_cifar10_ties_are_ties(pruned: list[tuple[float, float]], status: str) -> None:
    cifar, imagenet = tuned_sparse_faster_than_dense_on_cifar10_not_imagenet(
        analysis(_tuned_pruning("cifar10", pruned)))
    assert cifar.status == status
    assert cifar.comparisons and "tie(s) within noise" in cifar.evidence[0]
    assert imagenet.status == NOT_MEASURED
    assert "metaschedule" in imagenet.needs and "imagenet" in imagenet.needs


@pytest.mark.parametrize(("pruned", "status"), [
    ([(20.0, 0.1)] * 2, HELD),                  # never faster
    ([(20.0, 0.1), (9.95, 0.2)], TIE),          # a tie may hide a win
    ([(5.0, 0.1), (9.95, 0.2)], NOT_HELD),      # a decided win
])
def test_obs_2_imagenet_never_faster(pruned: list[tuple[float, float]], status: str) -> None:
    _, imagenet = tuned_sparse_faster_than_dense_on_cifar10_not_imagenet(
        analysis(_tuned_pruning("imagenet", pruned)))
    assert imagenet.status == status


# -- VII, IX: fastest family ------------------------------------------------------------------


def _tuned_cpu(cases: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """Per model: tuned dense direct at 5 +- 0.1 ms, spatial pack at (ms, half)."""
    rows = []
    for model, (ms, half) in zip(("resnet18", "vgg16", "mobilenetv2"), cases, strict=False):
        rows += [timed(5.0, 0.1, model=model, algorithm="direct", tuning=TUNED),
                 timed(ms, half, model=model, algorithm="spatial_pack", tuning=TUNED)]
    return rows


@pytest.mark.parametrize(("cases", "status"), [
    ([(4.0, 0.1)] * 3, HELD),
    ([(6.0, 0.1)] * 3, NOT_HELD),
    ([(4.95, 0.2)] * 3, TIE),                           # every fastest ties: a tie
    ([(4.0, 0.1), (4.0, 0.1), (4.95, 0.2)], HELD),      # 67%-100%
    ([(4.0, 0.1), (6.0, 0.1), (4.95, 0.2)], TIE),       # 33%-67%
])
def test_obs_7_fastest_family_with_ties(cases: list[tuple[float, float]], status: str) -> None:
    (part,) = spatial_pack_best_on_tuned_cpu(analysis(_tuned_cpu(cases)))
    assert part.status == status
    assert not part.needs or status == TIE


def test_obs_9_a_tie_among_other_families_still_decides() -> None:
    """direct_csr ties with spatial_pack_csr, both decidedly faster than gemm_csr: GEMM is
    decidedly not the fastest, whichever of the two is."""
    sparse = {"compression": "weight_pruning", "sparsity": 0.9}
    rows = [timed(5.0, 0.1, algorithm="gemm_csr", **sparse),
            timed(3.0, 0.1, algorithm="direct_csr", **sparse),
            timed(3.05, 0.1, algorithm="spatial_pack_csr", **sparse)]
    cpu, gpu = sparse_gemm_best_on_cpu_direct_on_gpu(analysis(rows))
    assert cpu.status == NOT_HELD and "0 of 1 cases, 0 tie(s)" in cpu.evidence[0]
    assert "ties with spatial_pack_csr" in cpu.evidence[1]
    assert gpu.status == NOT_MEASURED and "direct_csr" in gpu.needs and "cuda" in gpu.needs
    # gemm_csr within noise of the fastest: now it may be the fastest: a tie
    rows[0] = timed(3.02, 0.1, algorithm="gemm_csr", **sparse)
    assert sparse_gemm_best_on_cpu_direct_on_gpu(analysis(rows))[0].status == TIE


# -- X, XI, XII: thresholds on statistics -------------------------------------------------------


@pytest.mark.parametrize(("wp", "status"), [
    ((30.0, 0.5), HELD),      # 3.33x of 10x: 32.5%-34.2%, below 50%
    ((20.0, 1.0), TIE),       # 5x of 10x: 47.1%-53.2% spans 50%
    ((10.0, 0.1), NOT_HELD),  # 10x of 10x: ~100%
])
def test_obs_10_mean_share_of_expected_speedup_on_its_interval(
        wp: tuple[float, float], status: str) -> None:
    rows = [timed(100.0, 1.0),
            timed(*wp, compression="weight_pruning", algorithm="direct_csr", sparsity=0.9)]
    (part,) = pruning_rarely_reaches_expected_speedup(analysis(rows))
    assert part.status == status
    assert "% [" in part.evidence[0] and "a tie when the interval spans it" in part.evidence[0]
    assert part.comparisons


@pytest.mark.parametrize(("tuned", "status"), [
    ((40.0, 0.5), HELD),      # 2.5x: 2.44-2.56
    ((50.0, 1.0), TIE),       # 2x: 1.94-2.06 spans 2x
    ((80.0, 1.0), NOT_HELD),  # 1.25x
])
def test_obs_11_geomean_speedup_on_its_interval(tuned: tuple[float, float],
                                                status: str) -> None:
    rows = [timed(100.0, 1.0), timed(*tuned, tuning=TUNED)]
    accel, _ = tuning_accelerates_and_changes_best_choice(analysis(rows))
    assert accel.status == status
    # the interval is the timing's; the evidence says the search is one draw
    assert accel.evidence[0].startswith("tuned over untuned: geometric-mean speedup")
    assert "one draw of its search" in accel.evidence[1]


def _untuned_tuned(untuned: dict[str, tuple[float, float]],
                   tuned: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    return ([timed(ms, h, algorithm=alg) for alg, (ms, h) in untuned.items()]
            + [timed(ms, h, algorithm=alg, tuning=TUNED) for alg, (ms, h) in tuned.items()])


def test_obs_11_change_of_choice_is_a_tie_when_the_fastest_overlap() -> None:
    decided = _untuned_tuned({"direct": (10.0, 0.1), "gemm": (12.0, 0.1)},
                             {"direct": (8.0, 0.1), "gemm": (5.0, 0.1)})
    assert tuning_accelerates_and_changes_best_choice(analysis(decided))[1].status == HELD
    # untuned direct and gemm tie; tuned direct is decidedly fastest: it may not change
    tied = _untuned_tuned({"direct": (10.0, 0.1), "gemm": (10.05, 0.15)},
                          {"direct": (5.0, 0.1), "gemm": (8.0, 0.1)})
    change = tuning_accelerates_and_changes_best_choice(analysis(tied))[1]
    assert change.status == TIE and "may have changed (a tie)" in " ".join(change.evidence)
    same = _untuned_tuned({"direct": (10.0, 0.1), "gemm": (12.0, 0.1)},
                          {"direct": (5.0, 0.1), "gemm": (8.0, 0.1)})
    assert tuning_accelerates_and_changes_best_choice(analysis(same))[1].status == NOT_HELD


@pytest.mark.parametrize(("tuned_wp", "status"), [
    ((25.0, 0.5), HELD),      # 2x of 10x (20%) tuned vs 5x (50%) untuned
    ((11.0, 0.5), TIE),       # ~45% tuned vs 47-53% untuned: overlap
    ((5.0, 0.1), NOT_HELD),   # 10x (100%) tuned
])
def test_obs_12_tuned_vs_untuned_share_on_intervals(tuned_wp: tuple[float, float],
                                                    status: str) -> None:
    wp = {"compression": "weight_pruning", "algorithm": "direct_csr", "sparsity": 0.9}
    rows = [timed(100.0, 1.0), timed(20.0, 1.0, **wp),
            timed(50.0, 0.5, tuning=TUNED), timed(*tuned_wp, tuning=TUNED, **wp)]
    (part,) = pruned_lower_relative_speedup_when_tuned(analysis(rows))
    assert part.status == status


# -- the pruning the kernels can use counts as pruning -------------------------------------------


def test_structured_and_plugin_pruning_join_the_pruning_observations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Block, N:M and a third-party option tagged `pruning` are pruning to II, IX and X: the
    tuned block-pruned model is the model's best pruned one, and each joins the mean share
    of expected speedup; an untagged unknown compression does not."""
    from dlas import registry
    from dlas.report.tables import is_pruning, pruning_in

    class Opt:
        tags = frozenset({registry.PRUNING_TAG})

    real_get = registry.get
    monkeypatch.setattr(registry, "get", lambda layer, name: Opt() if name == "my_pruning"
                        else real_get(layer, name))
    assert is_pruning("block_pruning") and is_pruning("nm_pruning") and is_pruning("my_pruning")
    assert not is_pruning("int8") and not is_pruning("not_an_option")
    assert pruning_in(["my_pruning", "int8", "nm_pruning", "block_pruning", "none"]) == [
        "block_pruning", "nm_pruning", "my_pruning"]

    rows = [timed(10.0, 0.1, tuning=TUNED),
            timed(20.0, 0.1, tuning=TUNED, compression="weight_pruning",
                  algorithm="direct_csr", sparsity=0.8),
            timed(4.0, 0.1, tuning=TUNED, compression="block_pruning",
                  algorithm="mixed_csr", sparsity=0.8),
            timed(8.0, 0.1, tuning=TUNED, compression="my_pruning",
                  algorithm="gemm_csr", sparsity=0.5),
            timed(9.0, 0.1, tuning=TUNED, compression="nm_pruning",
                  algorithm="spatial_pack_csr", sparsity=0.5),
            timed(2.0, 0.1, tuning=TUNED, compression="my_quantization")]
    a = analysis(rows)
    cifar, _ = tuned_sparse_faster_than_dense_on_cifar10_not_imagenet(a)
    assert cifar.status == HELD  # only block pruning's 4 ms beats dense
    (pair,) = cifar.comparisons
    assert pair.other.compression == "block_pruning"
    (share,) = pruning_rarely_reaches_expected_speedup(a)
    assert "over 4 cases" in share.evidence[0] and "BP" in "".join(share.evidence)
    cpu, _ = sparse_gemm_best_on_cpu_direct_on_gpu(a)
    assert cpu.status == NOT_MEASURED  # each pruned model ran one sparse family only


# -- what would decide a not-measured part ------------------------------------------------------


def test_every_not_measured_part_says_what_to_add_to_the_sweep() -> None:
    obs = {o.number: o for o in observations([], load_paper())}
    for o in obs.values():
        assert o.status == NOT_MEASURED
        for part in o.parts:
            assert part.status == NOT_MEASURED and "`" in part.needs, (o.number, part.name)
        assert o.key_numbers.startswith("to decide: ")
    assert "a third model" in obs[1].parts[0].needs
    assert "`tuning: metaschedule`" in obs[7].parts[0].needs
    assert "spatial_pack" in obs[7].parts[0].needs
    assert "gemm_csr" in obs[9].parts[0].needs
    needs_12 = obs[12].parts[0].needs
    assert "metaschedule" in needs_12 and "weight_pruning" in needs_12
    assert "`targets`" in obs[13].parts[0].needs
    line = obs[10].parts[0].line(12)
    assert line.startswith("pruning below its expected speedup — not measured:")
    assert "; to decide it: `compression: [none, weight_pruning]`" in line


def test_decided_parts_need_nothing() -> None:
    (part,) = spatial_pack_best_on_tuned_cpu(analysis(_tuned_cpu([(4.0, 0.1)] * 3)))
    assert part.status == HELD and part.needs == ""


# -- the report ------------------------------------------------------------------------------------


def test_report_puts_the_papers_verdict_and_numbers_beside_ours(tmp_path: Path) -> None:
    rows = _tuned_cpu([(4.95, 0.2)] * 3)  # VII: every fastest a tie
    md = build_report(make_db(tmp_path / "r.db", rows), tmp_path / "out").markdown.read_text()
    section = md[md.index("## The paper's thirteen observations"):]
    table = section[:section.index("### I:")]
    assert "| # | observation (paper) | paper: verdict, numbers | ours | our key numbers |" \
        in table
    vii = next(line for line in table.splitlines() if line.startswith("| VII |"))
    assert "held: Tables 3 and 6, tuned CPU rows: Spatial fastest dense in 7 of 8" in vii
    assert "| tie |" in vii and "3 tie(s) within noise" in vii
    xiii = next(line for line in table.splitlines() if line.startswith("| XIII |"))
    assert "| not measured | to decide: a second CPU platform in `targets`" in xiii
    vi = next(line for line in table.splitlines() if line.startswith("| VI |"))
    assert "1.8 pp (CIFAR-10) and 22.2 pp (ImageNet" in vi
    details = section[section.index("### VII:"):section.index("### VIII:")]
    assert "to decide it: narrower intervals" in details
