"""The paper's thirteen observations (Section 6), each tested against our results.

Each observation is split into the parts its sentence claims; a part is *measured* only
when the data it needs exists (enough models, the algorithms it compares, tuned and
untuned runs, two platforms, ...). The observation is "held" when every measured part
holds, "not held" when one fails, "not measured" when no part could be tested, and marked
partial when some parts could not be. The rule each part applies is stated in its
evidence, so a reader can disagree with the threshold rather than with a hidden choice.

Every "faster" and "fastest" is decided with the timings' confidence intervals
(`dlas.report.comparisons`): a difference inside the noise is a tie, which never counts
as faster, and each part says how many of its comparisons were ties.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dlas.report.comparisons import decided_fastest, faster, ties_line
from dlas.report.data import Point
from dlas.report.paper import Paper
from dlas.report.speedup import SpeedupCell, geomean, mean, speedup_cells
from dlas.report.tables import (
    PRUNING,
    Cells,
    Group,
    accuracy_tables,
    fastest_algorithm,
    short,
    speed_cells,
)

HELD, NOT_HELD, NOT_MEASURED = "held", "not held", "not measured"

#: |Spearman rho| at or above this is a "strong" correlation.
STRONG_CORRELATION = 0.8
#: "Generally the best": the fastest in more than this share of cases.
GENERALLY = 0.5
#: Two speedups "vary" when one is at least this many times the other (or they straddle 1).
VARIES = 1.25
#: float16's accuracy change is "negligible" at or below this many percentage points.
NEGLIGIBLE_PP = 0.5
#: "Rarely the expected improvement": pruning's mean share of its ideal speedup is below.
RARELY_PCT = 50.0
#: Tuning "dramatically" accelerates: geometric-mean speedup over untuned of at least.
DRAMATIC = 2.0
#: One platform is "generally faster" than another in at least this share of matched points.
CONSISTENTLY = 0.75


@dataclass(frozen=True)
class Comparison:
    """Two points a part compared: `base` is the reference (dense, untuned, the runner-up),
    `other` the point the claim is about (pruned, tuned, the fastest). The report shows
    the layers whose times differ most between them (`dlas.report.deciding_layers`)."""

    case: str
    base: Point
    other: Point
    #: "change": the layers whose time changed most explain it; "expected": `other` is
    #: pruned and was expected to be faster by its density, so the layers that lost most
    #: time against that ideal explain it.
    kind: str = "change"


@dataclass
class Part:
    name: str
    status: str
    evidence: list[str] = field(default_factory=list)
    #: The point pairs its verdict rests on (empty for accuracy and correlation parts).
    comparisons: list[Comparison] = field(default_factory=list)


@dataclass
class Observation:
    number: int
    claim: str
    status: str
    partial: bool
    parts: list[Part]

    @property
    def roman(self) -> str:
        return to_roman(self.number)

    @property
    def status_label(self) -> str:
        return f"{self.status} (partly measured)" if self.partial else self.status


def to_roman(n: int) -> str:
    numerals = [(10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in numerals:
        while n >= value:
            out, n = out + letters, n - value
    return out


def combine(number: int, claim: str, parts: list[Part]) -> Observation:
    measured = [p for p in parts if p.status != NOT_MEASURED]
    if not measured:
        status = NOT_MEASURED
    else:
        status = HELD if all(p.status == HELD for p in measured) else NOT_HELD
    return Observation(number, claim, status, bool(measured) and len(measured) < len(parts),
                       parts)


def _status(ok: bool) -> str:
    return HELD if ok else NOT_HELD


# -- statistics --------------------------------------------------------------------------


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman rank correlation (average ranks for ties); None when undefined."""
    if len(xs) != len(ys) or len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    if vx == 0 or vy == 0:
        return None
    return cov / (vx * vy) ** 0.5


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


# -- the data the observations share -----------------------------------------------------


@dataclass
class Analysis:
    points: list[Point]
    cells: dict[Group, dict[str, Cells]]
    speedups: list[SpeedupCell]
    roles: dict[str, str]

    @classmethod
    def of(cls, points: Iterable[Point], paper: Paper | None = None) -> Analysis:
        points = [p for p in points if p.is_result]
        roles = dict(paper.datasets) if paper else {}
        return cls(points, speed_cells(points), speedup_cells(points), roles)

    def role(self, dataset: str) -> str:
        return self.roles.get(dataset, dataset)

    def model_facts(self) -> dict[str, list[tuple[str, int | None, int | None, float | None]]]:
        """Per dataset: (model label, params, MACs, dense top-1) of every model."""
        out: dict[str, list[tuple[str, int | None, int | None, float | None]]] = {}
        for table in accuracy_tables(self.points):
            out[table.dataset] = [(r.model_label, r.params, r.macs, r.top1) for r in table.rows]
        return out

    def best_dense(self) -> dict[Group, dict[str, Point]]:
        out: dict[Group, dict[str, Point]] = defaultdict(dict)
        for group, models in self.cells.items():
            for model, cells in models.items():
                best = fastest_algorithm(cells, "none")
                if best is not None:
                    out[group][model] = best
        return out


def _rho_line(name: str, rho: float | None, n: int) -> str:
    return f"{name}: Spearman rho = {rho:+.2f} over {n} models"


# -- I-XIII --------------------------------------------------------------------------------


def obs_1(a: Analysis) -> list[Part]:
    lines, rhos = [], []
    facts = a.model_facts()
    for dataset, models in facts.items():
        have = [(m, macs, top1) for m, _, macs, top1 in models if macs and top1 is not None]
        rho = spearman([float(x[1]) for x in have], [float(x[2]) for x in have])
        if rho is not None:
            rhos.append(rho)
            lines.append(_rho_line(f"{dataset}: MACs vs dense top-1", rho, len(have)))
    macs_of = {(d, m): macs for d, models in facts.items() for m, _, macs, _ in models}
    top1_of = {(d, m): t for d, models in facts.items() for m, _, _, t in models}
    for group, models in a.best_dense().items():
        for name, lookup in (("MACs", macs_of), ("dense top-1", top1_of)):
            pairs = [(lookup.get((group.dataset, m)), p.latency_ms) for m, p in models.items()]
            pairs = [(x, t) for x, t in pairs if x is not None and t is not None]
            rho = spearman([float(x) for x, _ in pairs], [t for _, t in pairs])
            if rho is not None:
                rhos.append(rho)
                lines.append(_rho_line(f"{group.label}: {name} vs best dense time", rho,
                                       len(pairs)))
    if not rhos:
        return [Part("correlations over >= 3 models", NOT_MEASURED,
                     ["needs at least 3 models with MACs, accuracy and timings"])]
    weak = [r for r in rhos if abs(r) < STRONG_CORRELATION]
    lines.append(f"rule: held when not every correlation is strong (|rho| >= "
                 f"{STRONG_CORRELATION}); {len(weak)} of {len(rhos)} are weak")
    return [Part("MACs, accuracy, time", _status(bool(weak)), lines)]


def _pruned_vs_dense(a: Analysis, tuned: bool) -> dict[str, list[tuple[Comparison,
                                                                     bool | None]]]:
    """Per dataset role: (best dense vs best pruned point, whether the pruned one is
    decidedly faster; None for a tie)."""
    out: dict[str, list[tuple[Comparison, bool | None]]] = defaultdict(list)
    for group, models in a.cells.items():
        if group.tuned != tuned:
            continue
        for model, cells in models.items():
            dense = fastest_algorithm(cells, "none")
            pruned = [fastest_algorithm(cells, c) for c in PRUNING]
            pruned = [p for p in pruned if p is not None]
            if dense is None or not pruned:
                continue
            best = min(pruned, key=lambda p: p.latency_ms or 0.0)
            out[a.role(group.dataset)].append((Comparison(f"{group.label} {model}", dense, best),
                                               faster(best, dense)))
    return out


def obs_2(a: Analysis) -> list[Part]:
    by_role = _pruned_vs_dense(a, tuned=True)
    parts = []
    for role, want_faster in (("cifar10", True), ("imagenet", False)):
        cases = by_role.get(role, [])
        name = f"{role}: tuned pruned {'faster' if want_faster else 'never faster'} than dense"
        if not cases:
            parts.append(Part(name, NOT_MEASURED, [f"no tuned pruned and dense {role} runs"]))
            continue
        wins = sum(f is True for _, f in cases)
        ties = sum(f is None for _, f in cases)
        share = wins / len(cases)
        ok = share > GENERALLY if want_faster else wins == 0
        verdict = {True: "faster", False: "not faster", None: "tie within noise"}
        parts.append(Part(name, _status(ok), [
            f"best pruned model decidedly faster than best dense in {wins} of {len(cases)} "
            f"tuned cases ({_pct(share)}; ties count as not faster)",
            ties_line(len(cases), ties),
            *(f"{c.case}: {verdict[f]}" for c, f in cases),
        ], [c for c, _ in cases]))
    return parts


def _drops(a: Analysis) -> dict[str, dict[str, dict[str, float]]]:
    """Per dataset, per compression: model -> accuracy drop in percentage points; pruning
    is compared at the highest level every model reached (fairer than their own elbows)."""
    out: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for table in accuracy_tables(a.points):
        for comp in table.compressions:
            rows = [r for r in table.rows
                    if comp in r.cells and r.top1 is not None
                    and r.cells[comp].accuracy is not None]
            levels = {r.model_label: _levels(a, table.dataset, r.model_label, comp)
                      for r in rows}
            common = set.intersection(*(set(v) for v in levels.values())) if levels else set()
            for r in rows:
                acc = levels[r.model_label][max(common)] if common else r.cells[comp].accuracy
                out[table.dataset][comp][r.model_label] = 100 * (r.top1 - acc)
    return out


def _levels(a: Analysis, dataset: str, model: str, comp: str) -> dict[float, float]:
    for p in a.points:
        if (p.dataset, p.model_label, p.compression) == (dataset, model, comp) and p.levels:
            return {float(lv["level"]): float(lv["accuracy"]) for lv in p.levels
                    if lv.get("accuracy") is not None and lv.get("level") is not None}
    return {}


def obs_3(a: Analysis) -> list[Part]:
    facts = a.model_facts()
    size_lines, size_ok = [], []
    for dataset, models in facts.items():
        have = [(p, t) for _, p, _, t in models if p and t is not None]
        rho = spearman([float(p) for p, _ in have], [t for _, t in have])
        if rho is not None:
            size_ok.append(abs(rho) < STRONG_CORRELATION)
            size_lines.append(_rho_line(f"{dataset}: parameters vs dense top-1", rho, len(have)))
    size = Part("size not strongly correlated with accuracy",
                _status(all(size_ok)) if size_ok else NOT_MEASURED,
                size_lines + [f"rule: |rho| < {STRONG_CORRELATION}"] if size_ok
                else ["needs at least 3 models with parameters and accuracy"])
    vul_lines, rhos = [], []
    params_of = {(d, m): p for d, models in facts.items() for m, p, _, _ in models}
    for dataset, per_comp in _drops(a).items():
        for comp, drops in per_comp.items():
            pairs = [(params_of.get((dataset, m)), d) for m, d in drops.items()]
            pairs = [(p, d) for p, d in pairs if p]
            rho = spearman([float(p) for p, _ in pairs], [d for _, d in pairs])
            if rho is not None:
                rhos.append(rho)
                vul_lines.append(_rho_line(f"{dataset} {short(comp)}: parameters vs accuracy "
                                           "drop", rho, len(pairs)))
    vulnerable = Part("smaller models more vulnerable to compression",
                      _status(mean(rhos) < 0) if rhos else NOT_MEASURED,
                      vul_lines + ["rule: mean rho < 0 (fewer parameters, larger drop)"]
                      if rhos else ["needs a compression applied to at least 3 models"])
    return [size, vulnerable]


def _by_model(cells: Iterable[SpeedupCell]) -> dict[tuple[Group, str], dict[str, SpeedupCell]]:
    out: dict[tuple[Group, str], dict[str, SpeedupCell]] = defaultdict(dict)
    for c in cells:
        out[(c.group, c.model_label)][c.compression] = c
    return out


def obs_4(a: Analysis) -> list[Part]:
    pairs = []
    for (group, model), comps in _by_model(a.speedups).items():
        cp = comps.get("channel_pruning") or comps.get("channel_pruning_physical")
        if "weight_pruning" in comps and cp is not None:
            pairs.append((f"{group.label} {model}", comps["weight_pruning"], cp))
    if not pairs:
        return [Part(n, NOT_MEASURED, ["needs weight and channel pruning of the same model"])
                for n in ("higher ratio", "faster", "less of its expected speedup")]
    tests: list[tuple[str, Callable[[SpeedupCell, SpeedupCell], bool | None]]] = [
        ("higher ratio", lambda w, c: None if w.ratio is None or c.ratio is None
         else w.ratio > c.ratio),
        ("faster", lambda w, c: faster(w.best, c.best)),
        ("less of its expected speedup", lambda w, c: None if w.pct_expected is None
         or c.pct_expected is None else w.pct_expected < c.pct_expected),
    ]
    parts = []
    for name, test in tests:
        results = [test(w, c) for _, w, c in pairs]
        flags = [f for f in results if f is not None]
        ties = len(results) - len(flags) if name == "faster" else 0
        if not flags:
            why = "every comparison a tie within noise" if ties else "ratios unknown"
            parts.append(Part(f"weight pruning {name}", NOT_MEASURED, [why]))
            continue
        share = _share(flags)
        evidence = [f"weight pruning {name} than channel pruning in {sum(flags)} of "
                    f"{len(flags)} decided cases ({_pct(share)}; rule: > {_pct(GENERALLY)})"]
        if name == "faster":
            evidence.append(ties_line(len(results), ties))
        compared = [Comparison(f"{label}: channel vs weight pruning", c.best, w.best)
                    for label, w, c in pairs] if name == "faster" else []
        parts.append(Part(f"weight pruning {name}", _status(share > GENERALLY), evidence,
                          compared))
    parts[-1].evidence += [
        f"{label}: WP {w.ratio or 0:.1f}x ideal, {w.speedup:.2f}x, "
        f"{w.pct_expected or 0:.1f}% | CP {c.ratio or 0:.1f}x ideal, {c.speedup:.2f}x, "
        f"{c.pct_expected or 0:.1f}%" for label, w, c in pairs]
    return parts


def _varies(x: float, y: float) -> bool:
    straddle = (x < 1) != (y < 1)
    return straddle or max(x, y) / min(x, y) >= VARIES


def obs_5(a: Analysis) -> list[Part]:
    per: dict[tuple[Group, str], dict[str, float]] = defaultdict(dict)
    compared = []
    for c in a.speedups:
        if c.compression in ("float16", "int8"):
            per[(c.group, c.compression)][c.model_label] = c.speedup
            compared.append(Comparison(f"{c.group.label} {c.model_label} {c.compression}",
                                       c.dense, c.best))
    lines, dtype_flags, platform_flags = [], [], []
    for group in sorted({g for g, _ in per}, key=lambda g: g.label):
        f16, i8 = per.get((group, "float16"), {}), per.get((group, "int8"), {})
        both = sorted(f16.keys() & i8.keys())  # the same models, so only the type differs
        if both:
            gf, gi = geomean(f16[m] for m in both), geomean(i8[m] for m in both)
            dtype_flags.append(_varies(gf, gi))
            lines.append(f"{group.label}: float16 {gf:.2f}x, int8 {gi:.2f}x over best dense "
                         f"(geometric mean over {len(both)} models)")
    for (g1, d1), (g2, d2) in itertools.combinations(sorted(per, key=lambda k: (k[0].label,
                                                                                 k[1])), 2):
        same_setting = (d1, g1.dataset, g1.device, g1.tuning) == (d2, g2.dataset, g2.device,
                                                                  g2.tuning)
        common = sorted(per[(g1, d1)].keys() & per[(g2, d2)].keys())
        if same_setting and g1.platform != g2.platform and common:
            s1 = geomean(per[(g1, d1)][m] for m in common)
            s2 = geomean(per[(g2, d2)][m] for m in common)
            platform_flags.append(_varies(s1, s2))
            lines.append(f"{short(d1)}: {s1:.2f}x on {g1.label}, {s2:.2f}x on {g2.label}")
    rule = (f"rule: varies when one speedup is >= {VARIES}x the other or one is a speedup "
            "and the other a slowdown")
    return [
        Part("by data type", _status(any(dtype_flags)) if dtype_flags else NOT_MEASURED,
             lines + [rule] if dtype_flags else ["needs float16 and int8 of the same model"],
             compared if dtype_flags else []),
        Part("by platform", _status(any(platform_flags)) if platform_flags else NOT_MEASURED,
             lines + [rule] if platform_flags else ["needs one data type on two platforms"]),
    ]


def obs_6(a: Analysis, paper: Paper | None) -> list[Part]:
    changes: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for table in accuracy_tables(a.points):
        for r in table.rows:
            for comp in ("float16", "int8"):
                cell = r.cells.get(comp)
                if cell and cell.accuracy is not None and r.top1 is not None:
                    changes[table.dataset][comp].append(100 * (r.top1 - cell.accuracy))
    paper_loss = {}
    if paper is not None:
        paper_loss = (paper.observations.get(6, {}).get("paper") or {}).get("int8_loss_pp", {})
    f16_lines, f16_ok, i8_lines, i8_ok = [], [], [], []
    for dataset, comps in sorted(changes.items()):
        f16 = mean(abs(x) for x in comps.get("float16", []))
        i8 = mean(comps.get("int8", []))
        if f16 is not None:
            f16_ok.append(f16 <= NEGLIGIBLE_PP)
            f16_lines.append(f"{dataset}: float16 changes top-1 by {f16:.2f} pp on average "
                             f"(rule: <= {NEGLIGIBLE_PP} pp)")
        if i8 is not None:
            beside = paper_loss.get(a.role(dataset))
            note = f" (paper: {beside} pp on {a.role(dataset)})" if beside is not None else ""
            i8_lines.append(f"{dataset}: calibrated int8 loses {i8:.2f} pp on average{note}")
            if f16 is not None:
                i8_ok.append(i8 >= f16)
    return [
        Part("float16 negligible", _status(all(f16_ok)) if f16_ok else NOT_MEASURED,
             f16_lines or ["no float16 accuracy measured"]),
        Part("calibrated int8 loses more than float16",
             _status(all(i8_ok)) if i8_ok else NOT_MEASURED,
             i8_lines or ["no int8 accuracy measured"]),
    ]


def _best_family(a: Analysis, device: str, tuned: bool | None, compressions: Iterable[str],
                 want: str) -> Part:
    cases: list[tuple[str, Point, list[Point]]] = []
    compared: list[Comparison] = []
    for group, models in a.cells.items():
        if group.device != device or (tuned is not None and group.tuned != tuned):
            continue
        for model, cells in models.items():
            for comp in compressions:
                families = {p.family for (c, _), p in cells.items() if c == comp}
                if want not in families or len(families) < 2:
                    continue
                best, ties = decided_fastest(p for (c, _), p in cells.items() if c == comp)
                if best is None:
                    continue
                # a tie with another algorithm of the same family decides nothing here
                rivals = [p for p in ties if p.family != best.family]
                label = f"{group.label} {model} {short(comp)}"
                runner_up = min((p for (c, _), p in cells.items() if c == comp
                                 and p.family != best.family and p.latency_ms is not None),
                                key=lambda p: p.latency_ms or 0.0, default=None)
                if not rivals and runner_up is not None:
                    compared.append(Comparison(f"{label}: fastest other family vs fastest",
                                               runner_up, best))
                cases.append((label, best, rivals))
    name = f"{want} fastest on {device.upper()}"
    if not cases:
        return Part(name, NOT_MEASURED, [f"needs {want} and another algorithm measured on a "
                                         f"{'tuned ' if tuned else ''}{device.upper()}"])
    decided = [(label, p) for label, p, rivals in cases if not rivals]
    ties = len(cases) - len(decided)
    lines = [ties_line(len(cases), ties), *(
        f"{label}: {p.algorithm}" + (f" (ties with {', '.join(r.algorithm for r in rivals)})"
                                     if rivals else "") for label, p, rivals in cases)]
    if not decided:
        return Part(name, NOT_MEASURED, ["every fastest algorithm ties with another "
                                         "family within noise", *lines])
    flags = [p.family == want for _, p in decided]
    share = _share(flags)
    return Part(name, _status(share > GENERALLY), [
        f"{want} decidedly fastest in {sum(flags)} of {len(flags)} decided cases "
        f"({_pct(share)}; rule: > {_pct(GENERALLY)})", *lines], compared)


def obs_7(a: Analysis) -> list[Part]:
    return [_best_family(a, "cpu", True, ["none"], "spatial_pack")]


def obs_8(a: Analysis) -> list[Part]:
    return [_best_family(a, "gpu", True, ["none"], "direct")]


def obs_9(a: Analysis) -> list[Part]:
    return [_best_family(a, "cpu", None, PRUNING, "gemm"),
            _best_family(a, "gpu", None, PRUNING, "direct")]


def obs_10(a: Analysis) -> list[Part]:
    cells = [c for c in a.speedups if c.compression in PRUNING and c.pct_expected is not None]
    if not cells:
        return [Part("pruning below its expected speedup", NOT_MEASURED,
                     ["needs pruned and dense timings of the same model"])]
    pct = mean(c.pct_expected for c in cells if c.pct_expected is not None)
    assert pct is not None
    reached = sum(1 for c in cells if (c.pct_expected or 0) >= 100)
    return [Part("pruning below its expected speedup", _status(pct < RARELY_PCT), [
        f"pruned models achieve {pct:.1f}% of their expected speedup on average over "
        f"{len(cells)} cases (rule: < {RARELY_PCT:.0f}%); {reached} reach 100%",
        *(f"{c.group.label} {c.model_label} {short(c.compression)}: {c.speedup:.2f}x of "
          f"{c.ratio:.1f}x ideal = {c.pct_expected:.1f}%" for c in cells)],
        [_dense_vs_compressed(c) for c in cells])]


def _dense_vs_compressed(c: SpeedupCell) -> Comparison:
    return Comparison(f"{c.group.label} {c.model_label} {short(c.compression)}", c.dense,
                      c.best, "expected")


def _untuned_tuned_pairs(a: Analysis) -> list[tuple[Point, Point]]:
    untuned: dict[tuple, Point] = {}
    for p in a.points:
        if not p.tuned:
            untuned[(p.dataset, p.platform, p.model_label, p.compression, p.algorithm)] = p
    pairs = []
    for p in a.points:
        key = (p.dataset, p.platform, p.model_label, p.compression, p.algorithm)
        if p.tuned and key in untuned:
            pairs.append((untuned[key], p))
    return pairs


def obs_11(a: Analysis) -> list[Part]:
    pairs = _untuned_tuned_pairs(a)
    if not pairs:
        return [Part(n, NOT_MEASURED, ["needs the same points untuned and tuned"])
                for n in ("tuning accelerates dramatically", "tuning changes the best choice")]
    gm = geomean(u.latency_ms / t.latency_ms for u, t in pairs)  # type: ignore[operator]
    accel = Part("tuning accelerates dramatically", _status(gm >= DRAMATIC), [
        f"tuned over untuned: geometric-mean speedup {gm:.2f}x over {len(pairs)} points "
        f"(rule: >= {DRAMATIC}x)"],
        [Comparison(f"{t.platform} {t.model_label} {short(t.compression)} {t.algorithm}", u, t)
         for u, t in pairs])
    changes, compared = [], 0
    compared_changes = tied_changes = 0
    by_setting: dict[tuple, dict[bool, Cells]] = defaultdict(dict)
    for group, models in a.cells.items():
        for model, cells in models.items():
            by_setting[(group.dataset, group.platform, model)][group.tuned] = cells
    for (_dataset, platform, model), both in by_setting.items():
        if True not in both or False not in both:
            continue
        compared += 1
        u, t = both[False], both[True]
        for comp in {c for c, _ in u} & {c for c, _ in t}:
            bu, tu = decided_fastest(p for (c, _), p in u.items() if c == comp)
            bt, tt = decided_fastest(p for (c, _), p in t.items() if c == comp)
            if bu and bt and bu.algorithm != bt.algorithm:
                compared_changes += 1
                if tu or tt:  # a fastest that ties with others is no change of choice
                    tied_changes += 1
                    continue
                changes.append(f"{platform} {model} {short(comp)}: fastest algorithm "
                               f"{bu.algorithm} untuned, {bt.algorithm} tuned")
        ou, tu = decided_fastest(u.values())
        ot, tt = decided_fastest(t.values())
        if ou and ot and (ou.compression, ou.algorithm) != (ot.compression, ot.algorithm):
            compared_changes += 1
            if tu or tt:
                tied_changes += 1
                continue
            changes.append(f"{platform} {model}: fastest combination "
                           f"{short(ou.compression)}+{ou.algorithm} untuned, "
                           f"{short(ot.compression)}+{ot.algorithm} tuned")
    lines = (changes or [f"no decided change of fastest algorithm or combination in "
                         f"{compared} models"]) + [
        f"{tied_changes} of {compared_changes} apparent change(s) were ties within noise "
        "(the fastest tied with another choice) and count as no change"]
    change = Part("tuning changes the best choice",
                  _status(bool(changes)) if compared else NOT_MEASURED,
                  lines if compared else ["needs models tuned and untuned"])
    return [accel, change]


def obs_12(a: Analysis) -> list[Part]:
    by_key: dict[tuple, dict[bool, SpeedupCell]] = defaultdict(dict)
    for c in a.speedups:
        if c.compression in PRUNING and c.pct_expected is not None:
            by_key[(c.group.dataset, c.group.platform, c.model_label, c.compression)][
                c.group.tuned] = c
    matched = [(v[False], v[True]) for v in by_key.values() if len(v) == 2]
    if not matched:
        return [Part("pruned relative speedup lower when tuned", NOT_MEASURED,
                     ["needs pruned and dense models both untuned and tuned"])]
    pu = mean(u.pct_expected for u, _ in matched if u.pct_expected is not None)
    pt = mean(t.pct_expected for _, t in matched if t.pct_expected is not None)
    assert pu is not None and pt is not None
    return [Part("pruned relative speedup lower when tuned", _status(pt < pu), [
        f"mean share of expected speedup: {pu:.1f}% untuned, {pt:.1f}% tuned over "
        f"{len(matched)} pruned models"], [_dense_vs_compressed(t) for _, t in matched])]


def obs_13(a: Analysis) -> list[Part]:
    parts = []
    for device in ("cpu", "gpu"):
        times: dict[str, dict[tuple, Point]] = defaultdict(dict)
        for p in a.points:
            if p.device == device and p.latency_ms is not None:
                key = (p.dataset, p.model_label, p.compression, p.algorithm, p.tuning)
                times[p.platform][key] = p
        lines, flags = [], []
        for x, y in itertools.combinations(sorted(times), 2):
            common = times[x].keys() & times[y].keys()
            if not common:
                continue
            verdicts = [faster(times[x][k], times[y][k]) for k in common]
            x_faster = sum(v is True for v in verdicts)
            y_faster = sum(v is False for v in verdicts)
            share = max(x_faster, y_faster) / len(common)
            winner, n = (x, x_faster) if x_faster >= y_faster else (y, y_faster)
            flags.append(share >= CONSISTENTLY)
            lines.append(f"{winner} decidedly faster in {n} of {len(common)} matched points "
                         f"({x} vs {y}; ties count for neither)")
            lines.append(ties_line(len(common), len(common) - x_faster - y_faster))
        name = f"one {device.upper()} generally faster than another"
        if not flags:
            parts.append(Part(name, NOT_MEASURED,
                              [f"needs two {device.upper()} platforms running the same points"]))
        else:
            parts.append(Part(name, _status(all(flags)), lines + [
                f"rule: one platform faster in >= {_pct(CONSISTENTLY)} of matched points"]))
    return parts


def observations(points: Iterable[Point], paper: Paper | None = None) -> list[Observation]:
    """All thirteen, in the paper's order, with the paper's wording when it is known."""
    a = Analysis.of(points, paper)
    checks: list[Callable[[Analysis], list[Part]]] = [
        obs_1, obs_2, obs_3, obs_4, obs_5, lambda x: obs_6(x, paper), obs_7, obs_8, obs_9,
        obs_10, obs_11, obs_12, obs_13,
    ]
    out = []
    for number, check in enumerate(checks, 1):
        claim = ""
        if paper is not None:
            claim = " ".join(str(paper.observations.get(number, {}).get("claim", "")).split())
        out.append(combine(number, claim, check(a)))
    return out
