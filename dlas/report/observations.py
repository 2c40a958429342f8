"""The paper's thirteen observations (Section 6), each tested against our results.

Each observation is split into the parts its sentence claims. A part is *held*, *not
held*, a *tie* or *not measured*, and states its rule with its numbers, so a reader can
disagree with a threshold rather than with a hidden choice:

- *not measured*: the data it needs is missing (enough models, the algorithms it
  compares, tuned and untuned runs, two platforms, ...). `Part.needs` then says what to
  add to the sweep to decide it, in the words of a sweep config (`models`, `compression:
  weight_pruning`, `algorithms: gemm_csr`, `tuning: metaschedule`, `targets`), so a
  smaller study knows which points would settle it.
- *tie*: the timings' confidence intervals leave it undecided. Every "faster" and
  "fastest" is decided by `dlas.report.comparisons` (a difference inside the noise is a
  tie); a threshold on a statistic computed from timings (a mean share of the expected
  speedup, a geometric-mean speedup) is decided on the statistic's interval (propagated
  as the `comparisons` module says) and is a tie when the interval straddles the
  threshold. `Part.needs` then names what narrows the intervals.
- a "generally" rule (the share of cases where something holds) counts a tied case as
  possibly either way: the share lies between (decided yes) / n and (decided yes + ties)
  / n; held when even the low end passes, not held when even the high end fails, a tie
  otherwise, so a part whose cases all tie is a tie.

The rules with intervals, per observation:

- II: per model, the best pruned point vs the best dense one (`faster`); CIFAR-10: the
  share rule > 50%; ImageNet: none faster (not held on a decided win, a tie on a tie).
- IV: "higher ratio" compares ratios (no timings); "faster" is the share rule on `faster`;
  "less of its expected speedup": the dense time cancels, so weight pruning's share is
  below channel pruning's exactly when time(CP) / time(WP) < ratio(WP) / ratio(CP), decided
  on that time ratio's interval; then the share rule.
- V: per model the compressed-over-dense speedup interval; per platform and type their
  geometric mean; two such speedups *vary* when the interval of their ratio lies beyond
  1.25x either way, or the two lie on opposite sides of 1; they do not when the ratio's
  interval lies within (1/1.25, 1.25) and both lie on one side of 1; a tie otherwise.
- VII-IX: per case, the fastest algorithm and those it ties with: a yes when all are of
  the family, a no when none is, a tie otherwise; then the share rule.
- X: the mean of the per-case % of expected speedup intervals against 50%.
- XI: the geometric mean of the tuned-over-untuned speedup intervals against 2x; "changes
  the best choice": per model (and compression) the choices tied for fastest untuned and
  tuned: a change when the two sets are disjoint, none when both are the same single
  choice, a tie otherwise; held on any change.
- XII: the tuned minus untuned mean % of expected speedup, its interval against 0.
- XIII: per pair of platforms, matched points by `faster`; the winner's share >= 75%.

Accuracy and correlation rules (I, III, VI) have no timing intervals and are decided on
their values.

Layouts: a rule that compares algorithms sees each at its fastest activation layout (the
speed cells, `dlas.report.tables`), so two layouts of one algorithm are never two rivals;
an algorithm choice (VII-IX, XI) is the algorithm, and its text names the layout when it
is not NCHW. A rule that pairs points one to one pairs the same layout: XI's untuned and
tuned the layout each ran in, XIII's platforms the layout the config asked for (NCHWc's
block is each CPU's SIMD width).

`combine`: an observation is not held when a decided part fails, held when every
decided part holds and at least one is decided (ties beside it are named in its label),
a tie when every measured part is a tie, not measured when no part is; "partly measured"
when some parts are not measured.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from dlas.report.comparisons import (
    Interval,
    above,
    at_least,
    compare_points,
    decided_fastest,
    difference_interval,
    faster,
    geomean_interval,
    mean_interval,
    ratio_interval,
    speedup_interval,
    ties_line,
)
from dlas.report.data import Point
from dlas.report.paper import Paper
from dlas.report.speedup import SpeedupCell, mean, speedup_cells
from dlas.report.tables import (
    PRUNING,
    Cells,
    Group,
    accuracy_tables,
    fastest_algorithm,
    short,
    speed_cells,
)

HELD, NOT_HELD, TIE, NOT_MEASURED = "held", "not held", "tie", "not measured"

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

#: What narrows a tie: more timing of the same points, or more cases.
TIE_NEEDS = ("narrower intervals: more timing rounds (`budgets: timing_rounds`) on a quiet "
             "machine, or more cases (another entry in `models`)")


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
    #: What would decide it, in sweep-config words: what to add when it is not measured,
    #: what narrows the intervals when it is a tie; empty when it is decided.
    needs: str = ""

    def line(self, max_evidence: int) -> str:
        """'name — status: evidence; ...; to decide it: needs', evidence capped."""
        shown = self.evidence[:max_evidence]
        more = len(self.evidence) - len(shown)
        detail = "; ".join(shown) + (f"; ... {more} more" if more > 0 else "")
        needs = f"; to decide it: {self.needs}" if self.needs else ""
        return f"{self.name} — {self.status}: {detail}{needs}"


@dataclass
class Observation:
    number: int
    claim: str
    status: str
    partial: bool
    parts: list[Part]
    #: The paper's own numbers behind the claim (experiments/paper.yaml), when given.
    paper_numbers: str = ""

    @property
    def roman(self) -> str:
        return to_roman(self.number)

    @property
    def ties(self) -> int:
        """Parts that tie beside a decided verdict (a tie observation counts none)."""
        return 0 if self.status == TIE else sum(p.status == TIE for p in self.parts)

    @property
    def status_label(self) -> str:
        notes = ["partly measured"] if self.partial else []
        if self.ties:
            notes.append(f"{self.ties} part(s) a tie")
        return f"{self.status} ({'; '.join(notes)})" if notes else self.status

    @property
    def key_numbers(self) -> str:
        """The numbers behind our verdict: a deciding part's (a failing one when it did
        not hold, a tie's when it is a tie), else every measured part's; for an
        unmeasured observation, what would decide it."""
        if self.status == NOT_MEASURED:
            needs = next((p.needs for p in self.parts if p.needs), "")
            return f"to decide: {needs}" if needs else ""
        deciding = [p for p in self.parts if p.status == self.status and p.evidence]
        if deciding:
            return deciding[0].evidence[0]
        return "; ".join(p.evidence[0] for p in self.parts
                         if p.evidence and p.status != NOT_MEASURED)


def to_roman(n: int) -> str:
    numerals = [(10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in numerals:
        while n >= value:
            out, n = out + letters, n - value
    return out


def combine(number: int, claim: str, parts: list[Part], paper_numbers: str = ""
            ) -> Observation:
    """The observation's status from its parts' (see the module doc); a tie part that
    does not say what would decide it is given `TIE_NEEDS`."""
    for p in parts:
        if p.status == TIE and not p.needs:
            p.needs = TIE_NEEDS
    measured = [p for p in parts if p.status != NOT_MEASURED]
    decided = [p for p in measured if p.status in (HELD, NOT_HELD)]
    if not measured:
        status = NOT_MEASURED
    elif any(p.status == NOT_HELD for p in decided):
        status = NOT_HELD
    elif decided:
        status = HELD
    else:
        status = TIE
    return Observation(number, claim, status, bool(measured) and len(measured) < len(parts),
                       parts, paper_numbers)


def _status(ok: bool | None) -> str:
    """held / not held for a decided verdict, tie for None (undecided within noise)."""
    return TIE if ok is None else HELD if ok else NOT_HELD


def _not(flag: bool | None) -> bool | None:
    return None if flag is None else not flag


def _all(flags: Iterable[bool | None]) -> bool | None:
    """Three-valued AND: False if any is False, True if all are True, else None."""
    flags = list(flags)
    if any(f is False for f in flags):
        return False
    return True if all(f is True for f in flags) else None


def _any(flags: Iterable[bool | None]) -> bool | None:
    """Three-valued OR: True if any is True, False if all are False, else None."""
    flags = list(flags)
    if any(f is True for f in flags):
        return True
    return False if all(f is False for f in flags) else None


def _generally(name: str, flags: Sequence[bool | None], what: str, *,
               threshold: float = GENERALLY, strict: bool = True,
               lines: Iterable[str] = (), comparisons: Iterable[Comparison] = ()) -> Part:
    """The share rule: `what` holds in more than (at least, unless strict) `threshold` of
    the cases; a tied case (None) may go either way, so the share is an interval."""
    n, yes = len(flags), sum(f is True for f in flags)
    unsure = sum(f is None for f in flags)
    share = Interval(yes / n, yes / n, (yes + unsure) / n)
    ok = above(share, threshold) if strict else at_least(share, threshold)
    span = _pct(share.low) + (f"-{_pct(share.high)}" if unsure else "")
    head = (f"{what} in {yes} of {n} cases, {unsure} tie(s) within noise: {span} (rule: "
            f"{'>' if strict else '>='} {_pct(threshold)}; a tie may go either way)")
    return Part(name, _status(ok), [head, *lines], list(comparisons))


def _dataset_option(role: str) -> str:
    """A sweep's `datasets` entry for a paper dataset."""
    return {"cifar10": "`datasets: cifar10` (or its stand-in `digits`)",
            "imagenet": "`datasets: imagenet`"}.get(role, f"`datasets: {role}`")


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
                     ["needs at least 3 models with MACs, accuracy and timings"],
                     needs="a third model: at least 3 `models` of one dataset that differ "
                           "in MACs and accuracy, dense (`compression: none`), with accuracy "
                           "and timings")]
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


_VERDICT = {True: "faster", False: "not faster", None: "tie within noise"}


def _never_faster(name: str, cases: list[tuple[Comparison, bool | None]]) -> Part:
    """ImageNet's half of II: no tuned pruned model faster; a tie may hide a win."""
    wins = sum(f is True for _, f in cases)
    ties = sum(f is None for _, f in cases)
    ok = False if wins else True if not ties else None
    return Part(name, _status(ok), [
        f"best pruned model decidedly faster than best dense in {wins} of {len(cases)} tuned "
        f"cases, {ties} tie(s) within noise (rule: in none; a tie may hide a win)",
        *(f"{c.case}: {_VERDICT[f]}" for c, f in cases)], [c for c, _ in cases])


def obs_2(a: Analysis) -> list[Part]:
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
            parts.append(_generally(
                name, [f for _, f in cases], "best pruned model decidedly faster than best "
                "dense (tuned)", lines=[f"{c.case}: {_VERDICT[f]}" for c, f in cases],
                comparisons=[c for c, _ in cases]))
        else:
            parts.append(_never_faster(name, cases))
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
                else ["needs at least 3 models with parameters and accuracy"],
                needs="" if size_ok else "a third model: at least 3 `models` of one dataset "
                                         "with their dense accuracy")
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
                      if rhos else ["needs a compression applied to at least 3 models"],
                      needs="" if rhos else "one `compression` option (e.g. "
                      "`weight_pruning`) applied to at least 3 `models` of one dataset, "
                      "with accuracies")
    return [size, vulnerable]


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
    return _not(at_least(Interval(cmp.ratio or 0.0, cmp.low, cmp.high), w.ratio / c.ratio))


def _obs4_ratio(pairs: _WP_CP_PAIRS) -> Part:
    known = [(w, c) for _, w, c in pairs if w.ratio is not None and c.ratio is not None]
    name = "weight pruning higher ratio"
    if not known:
        return Part(name, NOT_MEASURED, ["compression ratios unknown"],
                    needs="pruned rows that record their sparsity (re-run `compression: "
                          "[weight_pruning, channel_pruning]` with this dlas)")
    return _generally(name, [w.ratio > c.ratio for w, c in known],  # type: ignore[operator]
                      "weight pruning's compression ratio higher than channel pruning's")


def _obs4_faster(pairs: _WP_CP_PAIRS) -> Part:
    return _generally("weight pruning faster", [faster(w.best, c.best) for _, w, c in pairs],
                      "weight pruning decidedly faster than channel pruning",
                      comparisons=[Comparison(f"{label}: channel vs weight pruning", c.best,
                                              w.best) for label, w, c in pairs])


def _obs4_expected(pairs: _WP_CP_PAIRS) -> Part:
    known = [(label, w, c) for label, w, c in pairs
             if w.pct_expected is not None and c.pct_expected is not None]
    name = "weight pruning less of its expected speedup"
    if not known:
        return Part(name, NOT_MEASURED, ["compression ratios unknown"],
                    needs="pruned rows that record their sparsity (re-run `compression: "
                          "[weight_pruning, channel_pruning]` with this dlas)")
    return _generally(name, [_less_expected(w, c) for _, w, c in known],
                      "weight pruning decidedly reaches less of its expected speedup than "
                      "channel pruning", lines=[
        f"{label}: WP {w.ratio or 0:.1f}x ideal, {w.speedup:.2f}x, "
        f"{w.pct_expected or 0:.1f}% | CP {c.ratio or 0:.1f}x ideal, {c.speedup:.2f}x, "
        f"{c.pct_expected or 0:.1f}%" for label, w, c in known])


def obs_4(a: Analysis) -> list[Part]:
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
    return [_obs4_ratio(pairs), _obs4_faster(pairs), _obs4_expected(pairs)]


def _slowdown(iv: Interval) -> bool | None:
    """Whether a speedup is decidedly below 1 (True), at or above it (False), or a tie."""
    return _not(at_least(iv, 1.0))


def _varies(x: Interval, y: Interval) -> bool | None:
    """Whether two speedups vary (see the module doc): one decidedly >= VARIES times the
    other, or decidedly on opposite sides of 1; None when the intervals leave it open."""
    sx, sy = _slowdown(x), _slowdown(y)
    straddle = None if sx is None or sy is None else sx != sy
    r = ratio_interval(x, y)
    far = True if r.low >= VARIES or r.high <= 1 / VARIES else (
        False if 1 / VARIES < r.low and r.high < VARIES else None)
    return _any([straddle, far])


def _quant_speedups(a: Analysis) -> tuple[dict[tuple[Group, str], dict[str, Interval]],
                                          list[Comparison]]:
    """Per (group, float16 | int8): model -> speedup interval over the best dense point."""
    per: dict[tuple[Group, str], dict[str, Interval]] = defaultdict(dict)
    compared = []
    for c in a.speedups:
        if c.compression in ("float16", "int8"):
            per[(c.group, c.compression)][c.model_label] = speedup_interval(c.dense, c.best)
            compared.append(Comparison(f"{c.group.label} {c.model_label} {c.compression}",
                                       c.dense, c.best))
    return per, compared


def _by_dtype(per: dict[tuple[Group, str], dict[str, Interval]]
              ) -> tuple[list[bool | None], list[str]]:
    flags, lines = [], []
    for group in sorted({g for g, _ in per}, key=lambda g: g.label):
        f16, i8 = per.get((group, "float16"), {}), per.get((group, "int8"), {})
        both = sorted(f16.keys() & i8.keys())  # the same models, so only the type differs
        if both:
            gf = geomean_interval(f16[m] for m in both)
            gi = geomean_interval(i8[m] for m in both)
            flags.append(_varies(gf, gi))
            lines.append(f"{group.label}: float16 {gf.text(unit='x')}, int8 "
                         f"{gi.text(unit='x')} over best dense (geometric mean over "
                         f"{len(both)} models)")
    return flags, lines


def _by_platform(per: dict[tuple[Group, str], dict[str, Interval]]
                 ) -> tuple[list[bool | None], list[str]]:
    flags, lines = [], []
    keys = sorted(per, key=lambda k: (k[0].label, k[1]))
    for (g1, d1), (g2, d2) in itertools.combinations(keys, 2):
        same_setting = (d1, g1.dataset, g1.device, g1.tuning) == (d2, g2.dataset, g2.device,
                                                                  g2.tuning)
        common = sorted(per[(g1, d1)].keys() & per[(g2, d2)].keys())
        if same_setting and g1.platform != g2.platform and common:
            s1 = geomean_interval(per[(g1, d1)][m] for m in common)
            s2 = geomean_interval(per[(g2, d2)][m] for m in common)
            flags.append(_varies(s1, s2))
            lines.append(f"{short(d1)}: {s1.text(unit='x')} on {g1.label}, "
                         f"{s2.text(unit='x')} on {g2.label}")
    return flags, lines


def obs_5(a: Analysis) -> list[Part]:
    per, compared = _quant_speedups(a)
    dtype_flags, dtype_lines = _by_dtype(per)
    platform_flags, platform_lines = _by_platform(per)
    rule = (f"rule: varies when one speedup's interval is >= {VARIES}x the other's, or one "
            "is a speedup and the other a slowdown; a tie when the intervals leave it open")
    return [
        Part("by data type", _status(_any(dtype_flags)), dtype_lines + [rule], compared)
        if dtype_flags else Part(
            "by data type", NOT_MEASURED, ["needs float16 and int8 of the same model"],
            needs="`compression: [none, float16, int8]` for the same model and target"),
        Part("by platform", _status(_any(platform_flags)), platform_lines + [rule])
        if platform_flags else Part(
            "by platform", NOT_MEASURED, ["needs one data type on two platforms"],
            needs="`compression: float16` or `int8` (and `none`) for the same models on two "
                  "platforms of one kind: a second entry in `targets` (e.g. `remote`, a "
                  "board over TVM RPC)"),
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
             f16_lines or ["no float16 accuracy measured"],
             needs="" if f16_ok else "`compression: [none, float16]` with accuracy "
                                     "measured (a dataset with test images)"),
        Part("calibrated int8 loses more than float16",
             _status(all(i8_ok)) if i8_ok else NOT_MEASURED,
             i8_lines or ["no int8 accuracy measured"],
             needs="" if i8_ok else "`compression: [none, float16, int8]` for the same "
                                    "model, with accuracy measured"),
    ]


def _family_flag(best: Point, rivals: list[Point], want: str) -> bool | None:
    """Whether `want` is the fastest family: yes when the fastest and every algorithm of
    another family it ties with are `want`, no when none is, a tie otherwise."""
    in_play = {best.family} | {p.family for p in rivals}
    return True if in_play == {want} else False if want not in in_play else None


def _family_needs(want: str, device: str, tuned: bool | None, compressions: list[str]) -> str:
    pruned = set(compressions) <= PRUNING
    algorithm = f"{want}_csr" if pruned else want
    model = "a pruned model (`compression: weight_pruning`)" if pruned else \
        "a dense model (`compression: none`)"
    tuning = "`tuning: metaschedule`, " if tuned else ""
    target = "a GPU target (`targets: cuda`)" if device == "gpu" else "a CPU target " \
        "(`targets: host`)"
    return (f"{tuning}{model} with `algorithms: {algorithm}` and another algorithm "
            f"family{' (CSR)' if pruned else ''}, on {target}")


def _family_cases(a: Analysis, device: str, tuned: bool | None, compressions: list[str],
                  want: str) -> tuple[list[tuple[str, Point, list[Point]]], list[Comparison]]:
    """Per model and compression with `want` and another family measured: (label, the
    fastest point, the points of other families it ties with), and the comparisons of
    the decided ones (the fastest other family vs the fastest)."""
    cases: list[tuple[str, Point, list[Point]]] = []
    compared: list[Comparison] = []
    for group, models in a.cells.items():
        if group.device != device or (tuned is not None and group.tuned != tuned):
            continue
        for model, cells in models.items():
            for comp in compressions:
                candidates = [p for (c, _), p in cells.items() if c == comp]
                families = {p.family for p in candidates}
                if want not in families or len(families) < 2:
                    continue
                best, ties = decided_fastest(candidates)
                if best is None:
                    continue
                # a tie with another algorithm of the same family decides nothing here
                rivals = [p for p in ties if p.family != best.family]
                label = f"{group.label} {model} {short(comp)}"
                runner_up = min((p for p in candidates if p.family != best.family
                                 and p.latency_ms is not None),
                                key=lambda p: p.latency_ms or 0.0, default=None)
                if not rivals and runner_up is not None:
                    compared.append(Comparison(f"{label}: fastest other family vs fastest",
                                               runner_up, best))
                cases.append((label, best, rivals))
    return cases, compared


def _best_family(a: Analysis, device: str, tuned: bool | None, compressions: Iterable[str],
                 want: str) -> Part:
    comps = list(compressions)
    cases, compared = _family_cases(a, device, tuned, comps, want)
    name = f"{want} fastest on {device.upper()}"
    if not cases:
        return Part(name, NOT_MEASURED, [f"needs {want} and another algorithm measured on a "
                                         f"{'tuned ' if tuned else ''}{device.upper()}"],
                    needs=_family_needs(want, device, tuned, comps))
    lines = [f"{label}: {p.algorithm_label}" + (
        f" (ties with {', '.join(r.algorithm_label for r in rivals)})" if rivals else "")
        for label, p, rivals in cases]
    return _generally(name, [_family_flag(p, rivals, want) for _, p, rivals in cases],
                      f"{want} decidedly fastest", lines=lines, comparisons=compared)


def obs_7(a: Analysis) -> list[Part]:
    return [_best_family(a, "cpu", True, ["none"], "spatial_pack")]


def obs_8(a: Analysis) -> list[Part]:
    return [_best_family(a, "gpu", True, ["none"], "direct")]


def obs_9(a: Analysis) -> list[Part]:
    return [_best_family(a, "cpu", None, sorted(PRUNING), "gemm"),
            _best_family(a, "gpu", None, sorted(PRUNING), "direct")]


def _pct_expected(c: SpeedupCell) -> Interval:
    """A compressed model's % of its expected speedup, with the speedup's interval."""
    assert c.ratio is not None
    return speedup_interval(c.dense, c.best).scaled(100.0 / c.ratio)


def obs_10(a: Analysis) -> list[Part]:
    cells = [c for c in a.speedups if c.compression in PRUNING and c.pct_expected is not None]
    name = "pruning below its expected speedup"
    if not cells:
        return [Part(name, NOT_MEASURED, ["needs pruned and dense timings of the same model"],
                     needs="`compression: [none, weight_pruning]` (or `channel_pruning`) "
                           "for the same model, with its CSR `algorithms` (e.g. gemm_csr)")]
    pcts = [_pct_expected(c) for c in cells]
    pct = mean_interval(pcts)
    reached = sum(1 for c in cells if (c.pct_expected or 0) >= 100)
    return [Part(name, _status(_not(at_least(pct, RARELY_PCT))), [
        f"pruned models achieve {pct.text('.1f', '%')} of their expected speedup on average "
        f"over {len(cells)} cases (rule: < {RARELY_PCT:.0f}%, a tie when the interval "
        f"spans it); {reached} reach 100%",
        *(f"{c.group.label} {c.model_label} {short(c.compression)}: {c.speedup:.2f}x of "
          f"{c.ratio:.1f}x ideal = {p.text('.1f', '%')}" for c, p in zip(cells, pcts,
                                                                          strict=True))],
        [_dense_vs_compressed(c) for c in cells])]


def _dense_vs_compressed(c: SpeedupCell) -> Comparison:
    return Comparison(f"{c.group.label} {c.model_label} {short(c.compression)}", c.dense,
                      c.best, "expected")


def _setting_key(p: Point) -> tuple[str, ...]:
    """What two points must share to be the same variant of one model (on one platform):
    its compression, algorithm and layout (two layouts are two variants)."""
    return (p.dataset, p.platform, p.model_label, p.compression, p.algorithm, p.layout)


def _untuned_tuned_pairs(a: Analysis) -> list[tuple[Point, Point]]:
    """Each variant untuned and tuned (the same layout: tuning is what differs)."""
    untuned: dict[tuple, Point] = {}
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


def _accelerates(pairs: list[tuple[Point, Point]]) -> Part:
    gm = geomean_interval(speedup_interval(u, t) for u, t in pairs)
    return Part("tuning accelerates dramatically", _status(at_least(gm, DRAMATIC)), [
        f"tuned over untuned: geometric-mean speedup {gm.text(unit='x')} over {len(pairs)} "
        f"points (rule: >= {DRAMATIC}x, a tie when the interval spans it)"],
        [Comparison(f"{t.platform} {t.model_label} {short(t.compression)} "
                    f"{t.algorithm_label}", u, t) for u, t in pairs])


def _choice_change(untuned: Iterable[Point], tuned: Iterable[Point],
                   key: Callable[[Point], tuple[str, ...]],
                   shown: Callable[[Point], str]) -> tuple[bool | None, str]:
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


def _algorithm_choice(p: Point) -> tuple[str, ...]:
    return (p.algorithm,)


def _algorithm_shown(p: Point) -> str:
    return p.algorithm_label


def _combination_choice(p: Point) -> tuple[str, ...]:
    return (short(p.compression), p.algorithm)


def _combination_shown(p: Point) -> str:
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


def obs_11(a: Analysis) -> list[Part]:
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
        change = Part(name, _status(_any(flags)), [
            f"tuning decidedly changed the fastest choice in {changed} of {len(flags)} "
            f"choices, {ties} tie(s) within noise (rule: in any; the choices tied for "
            "fastest untuned and tuned must not overlap)", *lines])
    return [_accelerates(pairs), change]


def obs_12(a: Analysis) -> list[Part]:
    by_key: dict[tuple, dict[bool, SpeedupCell]] = defaultdict(dict)
    for c in a.speedups:
        if c.compression in PRUNING and c.pct_expected is not None:
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
    pu = mean_interval(_pct_expected(u) for u, _ in matched)
    pt = mean_interval(_pct_expected(t) for _, t in matched)
    lower = _not(at_least(difference_interval(pt, pu), 0.0))
    return [Part(name, _status(lower), [
        f"mean share of expected speedup: {pu.text('.1f', '%')} untuned, "
        f"{pt.text('.1f', '%')} tuned over {len(matched)} pruned models (rule: tuned lower; "
        "a tie when the intervals overlap)"], [_dense_vs_compressed(t) for _, t in matched])]


def _platform_pair(x: str, y: str, px: dict[tuple, Point], py: dict[tuple, Point]
                   ) -> tuple[bool | None, list[str]]:
    """Whether one of two platforms is faster in >= CONSISTENTLY of their matched points
    (ties may go to either), with its evidence."""
    common = px.keys() & py.keys()
    verdicts = [faster(px[k], py[k]) for k in common]
    x_faster = sum(v is True for v in verdicts)
    y_faster = sum(v is False for v in verdicts)
    ties = len(common) - x_faster - y_faster
    winner, n = (x, x_faster) if x_faster >= y_faster else (y, y_faster)
    share = Interval(n / len(common), n / len(common), (n + ties) / len(common))
    return at_least(share, CONSISTENTLY), [
        f"{winner} decidedly faster in {n} of {len(common)} matched points ({x} vs {y}; a "
        f"tie may go either way: {_pct(share.low)}-{_pct(share.high)})",
        ties_line(len(common), ties)]


def obs_13(a: Analysis) -> list[Part]:
    parts = []
    for device in ("cpu", "gpu"):
        times: dict[str, dict[tuple, Point]] = defaultdict(dict)
        for p in a.points:
            if p.device == device and p.latency_ms is not None:
                # the layout as configured: NCHWc is NCHW16c on one CPU, NCHW4c on another
                key = (p.dataset, p.model_label, p.compression, p.algorithm,
                       p.layout_choice, p.tuning)
                times[p.platform][key] = p
        lines, flags = [], []
        for x, y in itertools.combinations(sorted(times), 2):
            if times[x].keys() & times[y].keys():
                flag, more = _platform_pair(x, y, times[x], times[y])
                flags.append(flag)
                lines += more
        name = f"one {device.upper()} generally faster than another"
        if not flags:
            target = "`cuda` on another GPU" if device == "gpu" else "`remote`, an Arm " \
                "board over TVM RPC"
            parts.append(Part(name, NOT_MEASURED,
                              [f"needs two {device.upper()} platforms running the same points"],
                              needs=f"a second {device.upper()} platform in `targets` (e.g. "
                                    f"{target}) timing the same points"))
        else:
            parts.append(Part(name, _status(_all(flags)), lines + [
                f"rule: one platform faster in >= {_pct(CONSISTENTLY)} of matched points"]))
    return parts


def observations(points: Iterable[Point], paper: Paper | None = None) -> list[Observation]:
    """All thirteen, in the paper's order, with the paper's wording and numbers when they
    are known."""
    a = Analysis.of(points, paper)
    checks: list[Callable[[Analysis], list[Part]]] = [
        obs_1, obs_2, obs_3, obs_4, obs_5, lambda x: obs_6(x, paper), obs_7, obs_8, obs_9,
        obs_10, obs_11, obs_12, obs_13,
    ]
    out = []
    for number, check in enumerate(checks, 1):
        entry = paper.observations.get(number, {}) if paper is not None else {}
        claim = " ".join(str(entry.get("claim", "")).split())
        numbers = " ".join(str(entry.get("paper_numbers", "")).split())
        out.append(combine(number, claim, check(a), numbers))
    return out
