"""Data-type quantization: float16 and int8 against float32 (observations V and VI, the
paper's Sections 6.3 and 6.3.2).

The rules with intervals:

- V: per model the compressed-over-dense speedup interval; per platform and type their
  geometric mean; two such speedups *vary* when the interval of their ratio lies beyond
  1.25x either way, or the two lie on opposite sides of 1; they do not when the ratio's
  interval lies within (1/1.25, 1.25) and both lie on one side of 1; a tie otherwise.
- VI: accuracy changes, no timing intervals: decided on their values.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from dlas.report.comparisons import (
    Statistic,
    at_least,
    geomean_interval,
    ratio_interval,
    speedup_interval,
)
from dlas.report.observations.analysis import Analysis
from dlas.report.observations.verdict import (
    NEGLIGIBLE_PP,
    NOT_MEASURED,
    VARIES,
    ComparedPair,
    Part,
    any_of,
    negate,
    status_of,
)
from dlas.report.paper import Paper
from dlas.report.speedup import mean
from dlas.report.tables import Group, accuracy_tables, short

# -- V: quantization's speedup varies by platform and data type -----------------------------


def _slowdown(iv: Statistic) -> bool | None:
    """Whether a speedup is decidedly below 1 (True), at or above it (False), or a tie."""
    return negate(at_least(iv, 1.0))


def _varies(x: Statistic, y: Statistic) -> bool | None:
    """Whether two speedups vary (see the module doc): one decidedly >= VARIES times the
    other, or decidedly on opposite sides of 1; None when the intervals leave it open."""
    sx, sy = _slowdown(x), _slowdown(y)
    straddle = None if sx is None or sy is None else sx != sy
    r = ratio_interval(x, y)
    far = True if r.low >= VARIES or r.high <= 1 / VARIES else (
        False if 1 / VARIES < r.low and r.high < VARIES else None)
    return any_of([straddle, far])


def _quant_speedups(a: Analysis) -> tuple[dict[tuple[Group, str], dict[str, Statistic]],
                                          list[ComparedPair]]:
    """Per (group, float16 | int8): model -> speedup interval over the best dense point."""
    per: dict[tuple[Group, str], dict[str, Statistic]] = defaultdict(dict)
    compared = []
    for c in a.speedups:
        if c.compression in ("float16", "int8"):
            per[(c.group, c.compression)][c.model_label] = speedup_interval(c.dense, c.best)
            compared.append(ComparedPair(f"{c.group.label} {c.model_label} {c.compression}",
                                       c.dense, c.best))
    return per, compared


def _by_dtype(per: dict[tuple[Group, str], dict[str, Statistic]]
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


def _by_platform(per: dict[tuple[Group, str], dict[str, Statistic]]
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


def quantization_speedup_varies_by_platform_and_type(a: Analysis) -> list[Part]:
    """V: float16's speedup against int8's on one platform, and one type's across two."""
    per, compared = _quant_speedups(a)
    dtype_flags, dtype_lines = _by_dtype(per)
    platform_flags, platform_lines = _by_platform(per)
    rule = (f"rule: varies when one speedup's interval is >= {VARIES}x the other's, or one "
            "is a speedup and the other a slowdown; a tie when the intervals leave it open")
    return [
        Part("by data type", status_of(any_of(dtype_flags)), dtype_lines + [rule], compared)
        if dtype_flags else Part(
            "by data type", NOT_MEASURED, ["needs float16 and int8 of the same model"],
            needs="`compression: [none, float16, int8]` for the same model and target"),
        Part("by platform", status_of(any_of(platform_flags)), platform_lines + [rule])
        if platform_flags else Part(
            "by platform", NOT_MEASURED, ["needs one data type on two platforms"],
            needs="`compression: float16` or `int8` (and `none`) for the same models on two "
                  "platforms of one kind: a second entry in `targets` (e.g. `remote`, a "
                  "board over TVM RPC)"),
    ]


# -- VI: float16 keeps accuracy, calibrated int8 loses some ---------------------------------


def float16_negligible_int8_loses_accuracy(a: Analysis, paper: Paper | None = None
                                           ) -> list[Part]:
    """VI: float16's mean top-1 change against `NEGLIGIBLE_PP`, and int8's loss against
    float16's, with the paper's int8 losses beside ours (`paper`: default the analysis's)."""
    if paper is None:
        paper = a.paper
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
        Part("float16 negligible", status_of(all(f16_ok)) if f16_ok else NOT_MEASURED,
             f16_lines or ["no float16 accuracy measured"],
             needs="" if f16_ok else "`compression: [none, float16]` with accuracy "
                                     "measured (a dataset with test images)"),
        Part("calibrated int8 loses more than float16",
             status_of(all(i8_ok)) if i8_ok else NOT_MEASURED,
             i8_lines or ["no int8 accuracy measured"],
             needs="" if i8_ok else "`compression: [none, float16, int8]` for the same "
                                    "model, with accuracy measured"),
    ]
