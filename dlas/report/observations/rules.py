"""The paper's thirteen observations in the paper's order: the rule that decides each,
and the observations the report shows.

The paper's number of an observation is data, kept in one table (`RULES`), so a rule is
named after what it claims and the report's numbering (and Roman numerals) follows the
paper's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dlas.report.data import ReportPoint
from dlas.report.observations.algorithms import (
    direct_best_on_tuned_gpu,
    sparse_gemm_best_on_cpu_direct_on_gpu,
    spatial_pack_best_on_tuned_cpu,
)
from dlas.report.observations.analysis import Analysis
from dlas.report.observations.models import (
    macs_accuracy_and_time_not_strongly_correlated,
    size_not_accuracy_and_small_models_more_vulnerable,
)
from dlas.report.observations.platforms import one_platform_generally_faster_than_another
from dlas.report.observations.pruning import (
    pruning_rarely_reaches_expected_speedup,
    tuned_sparse_faster_than_dense_on_cifar10_not_imagenet,
    weight_pruning_beats_channel_pruning_but_less_of_expected,
)
from dlas.report.observations.quantization import (
    float16_negligible_int8_loses_accuracy,
    quantization_speedup_varies_by_platform_and_type,
)
from dlas.report.observations.tuning import (
    pruned_lower_relative_speedup_when_tuned,
    tuning_accelerates_and_changes_best_choice,
)
from dlas.report.observations.verdict import Observation, Part, combine
from dlas.report.paper import Paper

#: A rule: the parts of its observation, decided on the analysis of the points.
Rule = Callable[[Analysis], list[Part]]

#: The paper's number (Section 6) -> the rule that decides that observation.
RULES: dict[int, Rule] = {
    1: macs_accuracy_and_time_not_strongly_correlated,
    2: tuned_sparse_faster_than_dense_on_cifar10_not_imagenet,
    3: size_not_accuracy_and_small_models_more_vulnerable,
    4: weight_pruning_beats_channel_pruning_but_less_of_expected,
    5: quantization_speedup_varies_by_platform_and_type,
    6: float16_negligible_int8_loses_accuracy,
    7: spatial_pack_best_on_tuned_cpu,
    8: direct_best_on_tuned_gpu,
    9: sparse_gemm_best_on_cpu_direct_on_gpu,
    10: pruning_rarely_reaches_expected_speedup,
    11: tuning_accelerates_and_changes_best_choice,
    12: pruned_lower_relative_speedup_when_tuned,
    13: one_platform_generally_faster_than_another,
}


def observations(points: Iterable[ReportPoint], paper: Paper | None = None) -> list[Observation]:
    """All thirteen, in the paper's order, with the paper's wording and numbers when they
    are known."""
    a = Analysis.of(points, paper)
    out = []
    for number, rule in sorted(RULES.items()):
        entry = paper.observations.get(number, {}) if paper is not None else {}
        claim = " ".join(str(entry.get("claim", "")).split())
        numbers = " ".join(str(entry.get("paper_numbers", "")).split())
        out.append(combine(number, claim, rule(a), numbers))
    return out
