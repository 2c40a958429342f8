"""The models' own properties: MACs, parameters, accuracy and time (observations I and
III, the paper's Sections 6 and 6.2).

These rules compare models by Spearman rank correlation over at least 3 models and read
no timing intervals: they are decided on their values (`STRONG_CORRELATION`).
"""

from __future__ import annotations

from collections import defaultdict

from dlas.report.observations.analysis import Analysis, rho_line, spearman
from dlas.report.observations.verdict import (
    NOT_MEASURED,
    STRONG_CORRELATION,
    Part,
    status_of,
)
from dlas.report.speedup import mean
from dlas.report.tables import accuracy_tables, short


def macs_accuracy_and_time_not_strongly_correlated(a: Analysis) -> list[Part]:
    """I: not every correlation among MACs, dense top-1 and best dense time is strong."""
    lines, rhos = [], []
    facts = a.model_facts()
    for dataset, models in facts.items():
        have = [(m, macs, top1) for m, _, macs, top1 in models if macs and top1 is not None]
        rho = spearman([float(x[1]) for x in have], [float(x[2]) for x in have])
        if rho is not None:
            rhos.append(rho)
            lines.append(rho_line(f"{dataset}: MACs vs dense top-1", rho, len(have)))
    macs_of = {(d, m): macs for d, models in facts.items() for m, _, macs, _ in models}
    top1_of = {(d, m): t for d, models in facts.items() for m, _, _, t in models}
    for group, models in a.best_dense().items():
        for name, lookup in (("MACs", macs_of), ("dense top-1", top1_of)):
            pairs = [(lookup.get((group.dataset, m)), p.latency_ms) for m, p in models.items()]
            pairs = [(x, t) for x, t in pairs if x is not None and t is not None]
            rho = spearman([float(x) for x, _ in pairs], [t for _, t in pairs])
            if rho is not None:
                rhos.append(rho)
                lines.append(rho_line(f"{group.label}: {name} vs best dense time", rho,
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
    return [Part("MACs, accuracy, time", status_of(bool(weak)), lines)]


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


def size_not_accuracy_and_small_models_more_vulnerable(a: Analysis) -> list[Part]:
    """III: parameters weakly correlated with dense top-1; fewer parameters, larger drop
    under compression."""
    facts = a.model_facts()
    size_lines, size_ok = [], []
    for dataset, models in facts.items():
        have = [(p, t) for _, p, _, t in models if p and t is not None]
        rho = spearman([float(p) for p, _ in have], [t for _, t in have])
        if rho is not None:
            size_ok.append(abs(rho) < STRONG_CORRELATION)
            size_lines.append(rho_line(f"{dataset}: parameters vs dense top-1", rho, len(have)))
    size = Part("size not strongly correlated with accuracy",
                status_of(all(size_ok)) if size_ok else NOT_MEASURED,
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
                vul_lines.append(rho_line(f"{dataset} {short(comp)}: parameters vs accuracy "
                                          "drop", rho, len(pairs)))
    vulnerable = Part("smaller models more vulnerable to compression",
                      status_of(mean(rhos) < 0) if rhos else NOT_MEASURED,
                      vul_lines + ["rule: mean rho < 0 (fewer parameters, larger drop)"]
                      if rhos else ["needs a compression applied to at least 3 models"],
                      needs="" if rhos else "one `compression` option (e.g. "
                      "`weight_pruning`) applied to at least 3 `models` of one dataset, "
                      "with accuracies")
    return [size, vulnerable]
