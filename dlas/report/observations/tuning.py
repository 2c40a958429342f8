"""Auto-tuning against untuned code (observations XI and XII, the paper's Section 6.5).

The rules with intervals:

- XI: the geometric mean of the tuned-over-untuned speedup intervals against 2x; "changes
  the best choice": per model (and compression) the choices tied for fastest untuned and
  tuned: a change when the two sets are disjoint, none when both are the same single
  choice, a tie otherwise; held on any change. Untuned and tuned are paired in the layout
  each ran in; a choice is the algorithm (and compression), named with its layout.
- XII: the tuned minus untuned mean % of expected speedup, its interval against 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from dlas.report.comparisons import (
    at_least,
    decided_fastest,
    difference_interval,
    geomean_interval,
    mean_interval,
    speedup_interval,
)
from dlas.report.data import ReportPoint
from dlas.report.observations.analysis import Analysis, dense_vs_compressed, pct_expected
from dlas.report.observations.verdict import (
    DRAMATIC,
    NOT_MEASURED,
    ComparedPair,
    Part,
    any_of,
    negate,
    status_of,
)
from dlas.report.speedup import SpeedupCell
from dlas.report.tables import Cells, is_pruning, short

# -- XI: tuning accelerates dramatically and can change the best choice ---------------------


def _setting_key(p: ReportPoint) -> tuple[str, ...]:
    """What two points must share to be the same variant of one model (on one platform):
    its compression, algorithm and layout (two layouts are two variants)."""
    return (p.dataset, p.platform, p.model_label, p.compression, p.algorithm, p.layout)


def _untuned_tuned_pairs(a: Analysis) -> list[tuple[ReportPoint, ReportPoint]]:
    """Each variant untuned and tuned (the same layout: tuning is what differs)."""
    untuned: dict[tuple, ReportPoint] = {}
    for p in a.points:
        if not p.tuned:
            untuned[_setting_key(p)] = p
    pairs = []
    for p in a.points:
        key = _setting_key(p)
        if p.tuned and key in untuned:
            pairs.append((untuned[key], p))
    return pairs


_TUNE_NEEDS = ("`tuning: [none, metaschedule]` for the same points (one model, compression "
               "and algorithm, untuned and tuned)")


def _accelerates(pairs: list[tuple[ReportPoint, ReportPoint]]) -> Part:
    gm = geomean_interval(speedup_interval(u, t) for u, t in pairs)
    return Part("tuning accelerates dramatically", status_of(at_least(gm, DRAMATIC)), [
        f"tuned over untuned: geometric-mean speedup {gm.text(unit='x')} over {len(pairs)} "
        f"points (rule: >= {DRAMATIC}x, a tie when the interval spans it)",
        "each tuned point is one draw of its search: the interval covers its timing, not "
        "another draw (another seed is another search; docs/tuning.md, 'One seed, one "
        "search')"],
        [ComparedPair(f"{t.platform} {t.model_label} {short(t.compression)} "
                    f"{t.algorithm_label}", u, t) for u, t in pairs])


def _choice_change(untuned: Iterable[ReportPoint], tuned: Iterable[ReportPoint],
                   key: Callable[[ReportPoint], tuple[str, ...]],
                   shown: Callable[[ReportPoint], str]) -> tuple[bool | None, str]:
    """Whether the fastest choice changes with tuning: the choices tied for fastest
    untuned and tuned are disjoint (True), the same single choice (False), or overlap
    within noise (None); with the two fastest, as 'a untuned, b tuned' (`shown`: each
    named with its layout)."""
    bu, tu = decided_fastest(untuned)
    bt, tt = decided_fastest(tuned)
    assert bu is not None and bt is not None
    in_u, in_t = {key(p) for p in [bu, *tu]}, {key(p) for p in [bt, *tt]}
    flag = True if not in_u & in_t else False if in_u == in_t and len(in_u) == 1 else None
    return flag, f"{shown(bu)} untuned, {shown(bt)} tuned"


def _algorithm_choice(p: ReportPoint) -> tuple[str, ...]:
    return (p.algorithm,)


def _algorithm_shown(p: ReportPoint) -> str:
    return p.algorithm_label


def _combination_choice(p: ReportPoint) -> tuple[str, ...]:
    return (short(p.compression), p.algorithm)


def _combination_shown(p: ReportPoint) -> str:
    return f"{short(p.compression)}+{p.algorithm_label}"


def _changes(a: Analysis) -> tuple[list[bool | None], list[str]]:
    """Every (model, compression) algorithm choice and every model's combination that was
    measured untuned and tuned: whether tuning changed it, and a line per change.

    The choice is the algorithm (and compression), named with its layout: the cells hold
    each algorithm at its fastest layout only, so its other layouts, which may tie with
    it, are not there to overlap; a change of layout alone is not counted as a change."""
    by_setting: dict[tuple, dict[bool, Cells]] = defaultdict(dict)
    for group, models in a.cells.items():
        for model, cells in models.items():
            by_setting[(group.dataset, group.platform, model)][group.tuned] = cells
    flags: list[bool | None] = []
    lines = []
    for (_dataset, platform, model), both in by_setting.items():
        if len(both) < 2:
            continue
        u, t = both[False], both[True]
        checks = [(f"{short(comp)}: fastest algorithm", [p for (c, _), p in u.items()
                                                          if c == comp],
                   [p for (c, _), p in t.items() if c == comp], _algorithm_choice,
                   _algorithm_shown)
                  for comp in sorted({c for c, _ in u} & {c for c, _ in t})]
        checks.append(("fastest combination", list(u.values()), list(t.values()),
                       _combination_choice, _combination_shown))
        for what, pu, pt, key, shown in checks:
            flag, text = _choice_change(pu, pt, key, shown)
            flags.append(flag)
            if flag is not False:
                verdict = "changed" if flag else "may have changed (a tie)"
                lines.append(f"{platform} {model} {what} {verdict}: {text}")
    return flags, lines


def tuning_accelerates_and_changes_best_choice(a: Analysis) -> list[Part]:
    """XI: the tuned-over-untuned speedup, and whether tuning changes the fastest
    algorithm or combination."""
    pairs = _untuned_tuned_pairs(a)
    if not pairs:
        return [Part(n, NOT_MEASURED, ["needs the same points untuned and tuned"],
                     needs=_TUNE_NEEDS)
                for n in ("tuning accelerates dramatically", "tuning changes the best choice")]
    flags, lines = _changes(a)
    name = "tuning changes the best choice"
    if not flags:
        change = Part(name, NOT_MEASURED, ["needs models tuned and untuned"],
                      needs="`tuning: [none, metaschedule]` for one model with two "
                            "`algorithms` (e.g. direct and spatial_pack)")
    else:
        changed, ties = sum(f is True for f in flags), sum(f is None for f in flags)
        change = Part(name, status_of(any_of(flags)), [
            f"tuning decidedly changed the fastest choice in {changed} of {len(flags)} "
            f"choices, {ties} tie(s) within noise (rule: in any; the choices tied for "
            "fastest untuned and tuned must not overlap)", *lines])
    return [_accelerates(pairs), change]


# -- XII: pruned models gain less from tuning -------------------------------------------------


def pruned_lower_relative_speedup_when_tuned(a: Analysis) -> list[Part]:
    """XII: pruned models' mean share of their expected speedup, tuned against untuned."""
    by_key: dict[tuple, dict[bool, SpeedupCell]] = defaultdict(dict)
    for c in a.speedups:
        if is_pruning(c.compression) and c.pct_expected is not None:
            by_key[(c.group.dataset, c.group.platform, c.model_label, c.compression)][
                c.group.tuned] = c
    matched = [(v[False], v[True]) for v in by_key.values() if len(v) == 2]
    name = "pruned relative speedup lower when tuned"
    if not matched:
        return [Part(name, NOT_MEASURED,
                     ["needs pruned and dense models both untuned and tuned"],
                     needs="`tuning: [none, metaschedule]` for a pruned and a dense model "
                           "of one dataset (`compression: [none, weight_pruning]`, "
                           "`algorithms` with their CSR variants, e.g. gemm and gemm_csr)")]
    pu = mean_interval(pct_expected(u) for u, _ in matched)
    pt = mean_interval(pct_expected(t) for _, t in matched)
    lower = negate(at_least(difference_interval(pt, pu), 0.0))
    return [Part(name, status_of(lower), [
        f"mean share of expected speedup: {pu.text('.1f', '%')} untuned, "
        f"{pt.text('.1f', '%')} tuned over {len(matched)} pruned models (rule: tuned lower; "
        "a tie when the intervals overlap)"], [dense_vs_compressed(t) for _, t in matched])]
