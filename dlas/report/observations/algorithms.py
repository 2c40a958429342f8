"""Which convolution algorithm is fastest (observations VII, VIII and IX, the paper's
Section 6.4).

The rule: per case (model and compression on one platform), the fastest algorithm and
those it ties with: a yes when all are of the family the claim names, a no when none is,
a tie otherwise; then the share rule (`generally`). Each algorithm is seen at its fastest
layout (the speed cells), so two layouts of one algorithm are never two rivals; the
evidence names an algorithm's layout when it is not NCHW.
"""

from __future__ import annotations

from collections.abc import Iterable

from dlas.report.comparisons import decided_fastest
from dlas.report.data import ReportPoint
from dlas.report.observations.analysis import Analysis
from dlas.report.observations.verdict import NOT_MEASURED, ComparedPair, Part, generally
from dlas.report.tables import PRUNING, is_pruning, pruning_in, short


def _family_flag(best: ReportPoint, rivals: list[ReportPoint], want: str) -> bool | None:
    """Whether `want` is the fastest family: yes when the fastest and every algorithm of
    another family it ties with are `want`, no when none is, a tie otherwise."""
    in_play = {best.family} | {p.family for p in rivals}
    return True if in_play == {want} else False if want not in in_play else None


def _family_needs(want: str, device: str, tuned: bool | None, compressions: list[str]) -> str:
    pruned = all(is_pruning(c) for c in compressions)
    algorithm = f"{want}_csr" if pruned else want
    model = "a pruned model (`compression: weight_pruning`)" if pruned else \
        "a dense model (`compression: none`)"
    tuning = "`tuning: metaschedule`, " if tuned else ""
    target = "a GPU target (`targets: cuda`)" if device == "gpu" else "a CPU target " \
        "(`targets: host`)"
    return (f"{tuning}{model} with `algorithms: {algorithm}` and another algorithm "
            f"family{' (CSR)' if pruned else ''}, on {target}")


def _family_cases(a: Analysis, device: str, tuned: bool | None, compressions: list[str],
                  want: str
                  ) -> tuple[list[tuple[str, ReportPoint, list[ReportPoint]]], list[ComparedPair]]:
    """Per model and compression with `want` and another family measured: (label, the
    fastest point, the points of other families it ties with), and the comparisons of
    the decided ones (the fastest other family vs the fastest)."""
    cases: list[tuple[str, ReportPoint, list[ReportPoint]]] = []
    compared: list[ComparedPair] = []
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
                    compared.append(ComparedPair(f"{label}: fastest other family vs fastest",
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
    return generally(name, [_family_flag(p, rivals, want) for _, p, rivals in cases],
                     f"{want} decidedly fastest", lines=lines, comparisons=compared)


def spatial_pack_best_on_tuned_cpu(a: Analysis) -> list[Part]:
    """VII: dense, tuned, on the CPU."""
    return [_best_family(a, "cpu", True, ["none"], "spatial_pack")]


def direct_best_on_tuned_gpu(a: Analysis) -> list[Part]:
    """VIII: dense, tuned, on the GPU."""
    return [_best_family(a, "gpu", True, ["none"], "direct")]


def sparse_gemm_best_on_cpu_direct_on_gpu(a: Analysis) -> list[Part]:
    """IX: pruned models, tuned or not."""
    measured = pruning_in(c for models in a.cells.values() for cells in models.values()
                          for c, _ in cells) or sorted(PRUNING)
    return [_best_family(a, "cpu", None, measured, "gemm"),
            _best_family(a, "gpu", None, measured, "direct")]
