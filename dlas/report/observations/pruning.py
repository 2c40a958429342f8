"""Pruning against the dense models it compresses (observations II, IV and X, the paper's
Sections 6.1, 6.3.1 and 6.4).

The rules with intervals:

- II: per model, the best pruned point vs the best dense one (`faster`); CIFAR-10: the
  share rule > 50%; ImageNet: none faster (not held on a decided win, a tie on a tie).
- IV: "higher ratio" compares ratios (no timings); "faster" is the share rule on `faster`;
  "less of its expected speedup": the dense time cancels, so weight pruning's share is
  below channel pruning's exactly when time(CP) / time(WP) < ratio(WP) / ratio(CP), decided
  on that time ratio's interval; then the share rule.
- X: the mean of the per-case % of expected speedup intervals against 50%.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from dlas.report.comparisons import Statistic, at_least, compare_points, faster, mean_interval
from dlas.report.observations.analysis import Analysis, dense_vs_compressed, pct_expected
from dlas.report.observations.verdict import (
    NOT_MEASURED,
    RARELY_PCT,
    ComparedPair,
    Part,
    generally,
    negate,
    status_of,
)
from dlas.report.speedup import SpeedupCell
from dlas.report.tables import Group, fastest_algorithm, is_pruning, pruning_in, short

# -- II: tuned sparse CIFAR-10 models faster than dense, ImageNet ones not -----------------


def _dataset_option(role: str) -> str:
    """A sweep's `datasets` entry for a paper dataset."""
    return {"cifar10": "`datasets: cifar10` (or its stand-in `digits`)",
            "imagenet": "`datasets: imagenet`"}.get(role, f"`datasets: {role}`")


def _pruned_vs_dense(a: Analysis, tuned: bool) -> dict[str, list[tuple[ComparedPair,
                                                                     bool | None]]]:
    """Per dataset role: (best dense vs best pruned point, whether the pruned one is
    decidedly faster; None for a tie)."""
    out: dict[str, list[tuple[ComparedPair, bool | None]]] = defaultdict(list)
    for group, models in a.cells.items():
        if group.tuned != tuned:
            continue
        for model, cells in models.items():
            dense = fastest_algorithm(cells, "none")
            pruned = [fastest_algorithm(cells, c) for c in pruning_in(c for c, _ in cells)]
            pruned = [p for p in pruned if p is not None]
            if dense is None or not pruned:
                continue
            best = min(pruned, key=lambda p: p.latency_ms or 0.0)
            out[a.role(group.dataset)].append((ComparedPair(f"{group.label} {model}", dense, best),
                                               faster(best, dense)))
    return out


_VERDICT = {True: "faster", False: "not faster", None: "tie within noise"}


def _never_faster(name: str, cases: list[tuple[ComparedPair, bool | None]]) -> Part:
    """ImageNet's half of II: no tuned pruned model faster; a tie may hide a win."""
    wins = sum(f is True for _, f in cases)
    ties = sum(f is None for _, f in cases)
    ok = False if wins else True if not ties else None
    return Part(name, status_of(ok), [
        f"best pruned model decidedly faster than best dense in {wins} of {len(cases)} tuned "
        f"cases, {ties} tie(s) within noise (rule: in none; a tie may hide a win)",
        *(f"{c.case}: {_VERDICT[f]}" for c, f in cases)], [c for c, _ in cases])


def tuned_sparse_faster_than_dense_on_cifar10_not_imagenet(a: Analysis) -> list[Part]:
    """II: per dataset role, the best tuned pruned model against the best tuned dense."""
    by_role = _pruned_vs_dense(a, tuned=True)
    parts = []
    for role, want_faster in (("cifar10", True), ("imagenet", False)):
        cases = by_role.get(role, [])
        name = f"{role}: tuned pruned {'faster' if want_faster else 'never faster'} than dense"
        if not cases:
            parts.append(Part(name, NOT_MEASURED, [f"no tuned pruned and dense {role} runs"],
                              needs=f"`tuning: metaschedule` for a pruned (`compression: "
                                    f"weight_pruning`, `algorithms: gemm_csr`) and a dense "
                                    f"(`compression: none`) model of {_dataset_option(role)}"))
        elif want_faster:
            parts.append(generally(
                name, [f for _, f in cases], "best pruned model decidedly faster than best "
                "dense (tuned)", lines=[f"{c.case}: {_VERDICT[f]}" for c, f in cases],
                comparisons=[c for c, _ in cases]))
        else:
            parts.append(_never_faster(name, cases))
    return parts


# -- IV: weight pruning against channel pruning --------------------------------------------


def _by_model(cells: Iterable[SpeedupCell]) -> dict[tuple[Group, str], dict[str, SpeedupCell]]:
    out: dict[tuple[Group, str], dict[str, SpeedupCell]] = defaultdict(dict)
    for c in cells:
        out[(c.group, c.model_label)][c.compression] = c
    return out


_WP_CP_PAIRS = list[tuple[str, SpeedupCell, SpeedupCell]]


def _less_expected(w: SpeedupCell, c: SpeedupCell) -> bool | None:
    """Whether weight pruning reaches less of its expected speedup than channel pruning.
    The dense time cancels: WP's share < CP's iff time(CP) / time(WP) < ratio(WP) /
    ratio(CP), decided on that time ratio's interval."""
    assert w.ratio is not None and c.ratio is not None
    cmp = compare_points(w.best, c.best)  # ratio = time(CP) / time(WP)
    if cmp.low is None or cmp.high is None:
        return None
    return negate(at_least(Statistic(cmp.ratio or 0.0, cmp.low, cmp.high), w.ratio / c.ratio))


def _higher_ratio(pairs: _WP_CP_PAIRS) -> Part:
    known = [(w, c) for _, w, c in pairs if w.ratio is not None and c.ratio is not None]
    name = "weight pruning higher ratio"
    if not known:
        return Part(name, NOT_MEASURED, ["compression ratios unknown"],
                    needs="pruned rows that record their sparsity (re-run `compression: "
                          "[weight_pruning, channel_pruning]` with this dlas)")
    return generally(name, [w.ratio > c.ratio for w, c in known],  # type: ignore[operator]
                     "weight pruning's compression ratio higher than channel pruning's")


def _faster(pairs: _WP_CP_PAIRS) -> Part:
    return generally("weight pruning faster", [faster(w.best, c.best) for _, w, c in pairs],
                     "weight pruning decidedly faster than channel pruning",
                     comparisons=[ComparedPair(f"{label}: channel vs weight pruning", c.best,
                                             w.best) for label, w, c in pairs])


def _less_of_expected(pairs: _WP_CP_PAIRS) -> Part:
    known = [(label, w, c) for label, w, c in pairs
             if w.pct_expected is not None and c.pct_expected is not None]
    name = "weight pruning less of its expected speedup"
    if not known:
        return Part(name, NOT_MEASURED, ["compression ratios unknown"],
                    needs="pruned rows that record their sparsity (re-run `compression: "
                          "[weight_pruning, channel_pruning]` with this dlas)")
    return generally(name, [_less_expected(w, c) for _, w, c in known],
                     "weight pruning decidedly reaches less of its expected speedup than "
                     "channel pruning", lines=[
        f"{label}: WP {w.ratio or 0:.1f}x ideal, {w.speedup_text}, "
        f"{w.pct_expected or 0:.1f}% | CP {c.ratio or 0:.1f}x ideal, {c.speedup_text}, "
        f"{c.pct_expected or 0:.1f}%" for label, w, c in known])


def weight_pruning_beats_channel_pruning_but_less_of_expected(a: Analysis) -> list[Part]:
    """IV: weight pruning's ratio and speed against channel pruning's, and its share of
    the expected speedup, per model."""
    pairs = []
    for (group, model), comps in _by_model(a.speedups).items():
        cp = comps.get("channel_pruning") or comps.get("channel_pruning_physical")
        if "weight_pruning" in comps and cp is not None:
            pairs.append((f"{group.label} {model}", comps["weight_pruning"], cp))
    if not pairs:
        needs = ("`compression: [none, weight_pruning, channel_pruning]` for the same model, "
                 "with their CSR `algorithms` (e.g. gemm_csr)")
        return [Part(f"weight pruning {n}", NOT_MEASURED,
                     ["needs weight and channel pruning of the same model"], needs=needs)
                for n in ("higher ratio", "faster", "less of its expected speedup")]
    return [_higher_ratio(pairs), _faster(pairs), _less_of_expected(pairs)]


# -- X: pruning rarely reaches its expected speedup ----------------------------------------


def pruning_rarely_reaches_expected_speedup(a: Analysis) -> list[Part]:
    """X: pruned models' mean share of their ideal speedup, against `RARELY_PCT`."""
    cells = [c for c in a.speedups if is_pruning(c.compression) and c.pct_expected is not None]
    name = "pruning below its expected speedup"
    if not cells:
        return [Part(name, NOT_MEASURED, ["needs pruned and dense timings of the same model"],
                     needs="`compression: [none, weight_pruning]` (or `channel_pruning`) "
                           "for the same model, with its CSR `algorithms` (e.g. gemm_csr)")]
    pcts = [pct_expected(c) for c in cells]
    pct = mean_interval(pcts)
    reached = sum(1 for c in cells if (c.pct_expected or 0) >= 100)
    return [Part(name, status_of(negate(at_least(pct, RARELY_PCT))), [
        f"pruned models achieve {pct.text('.1f', '%')} of their expected speedup on average "
        f"over {len(cells)} cases (rule: < {RARELY_PCT:.0f}%, a tie when the interval "
        f"spans it); {reached} reach 100%",
        *(f"{c.group.label} {c.model_label} {short(c.compression)}: {c.speedup_text} of "
          f"{c.ratio:.1f}x ideal = {p.text('.1f', '%')}" for c, p in zip(cells, pcts,
                                                                          strict=True))],
        [dense_vs_compressed(c) for c in cells])]
