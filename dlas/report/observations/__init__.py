"""The paper's thirteen observations (Section 6), each tested against our results.

One idea per module:

- `verdict`: how a part is decided (held, not held, a tie, not measured), the
  thresholds, the share rule, and how parts combine into an observation's verdict;
- `analysis`: rank statistics and the analysis of the points the rules share;
- the rules, by theme, each named after its claim: `models` (I, III), `pruning` (II,
  IV, X), `quantization` (V, VI), `algorithms` (VII-IX), `tuning` (XI, XII),
  `platforms` (XIII); each module's doc states its rules with their intervals;
- `rules`: the paper's number -> rule table (`RULES`) and `observations`, which builds
  them in the paper's order.

Layouts: a rule that compares algorithms sees each at its fastest activation layout (the
speed cells, `dlas.report.tables`), so two layouts of one algorithm are never two rivals;
an algorithm choice (VII-IX, XI) is the algorithm, and its text names the layout when it
is not NCHW. A rule that pairs points one to one pairs the same layout: XI's untuned and
tuned the layout each ran in, XIII's platforms the layout the config asked for (NCHWc's
block is each CPU's SIMD width).

Accuracy and correlation rules (I, III, VI) have no timing intervals and are decided on
their values.
"""

from dlas.report.observations.algorithms import (
    direct_best_on_tuned_gpu,
    sparse_gemm_best_on_cpu_direct_on_gpu,
    spatial_pack_best_on_tuned_cpu,
)
from dlas.report.observations.analysis import Analysis, spearman
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
from dlas.report.observations.rules import RULES, Rule, observations
from dlas.report.observations.tuning import (
    pruned_lower_relative_speedup_when_tuned,
    tuning_accelerates_and_changes_best_choice,
)
from dlas.report.observations.verdict import (
    CONSISTENTLY,
    DRAMATIC,
    GENERALLY,
    HELD,
    NEGLIGIBLE_PP,
    NOT_HELD,
    NOT_MEASURED,
    RARELY_PCT,
    STRONG_CORRELATION,
    TIE,
    TIE_NEEDS,
    VARIES,
    ComparedPair,
    Observation,
    Part,
    combine,
    to_roman,
)

__all__ = [
    "CONSISTENTLY",
    "DRAMATIC",
    "GENERALLY",
    "HELD",
    "NEGLIGIBLE_PP",
    "NOT_HELD",
    "NOT_MEASURED",
    "RARELY_PCT",
    "RULES",
    "STRONG_CORRELATION",
    "TIE",
    "TIE_NEEDS",
    "VARIES",
    "Analysis",
    "ComparedPair",
    "Observation",
    "Part",
    "Rule",
    "combine",
    "direct_best_on_tuned_gpu",
    "float16_negligible_int8_loses_accuracy",
    "macs_accuracy_and_time_not_strongly_correlated",
    "observations",
    "one_platform_generally_faster_than_another",
    "pruned_lower_relative_speedup_when_tuned",
    "pruning_rarely_reaches_expected_speedup",
    "quantization_speedup_varies_by_platform_and_type",
    "size_not_accuracy_and_small_models_more_vulnerable",
    "sparse_gemm_best_on_cpu_direct_on_gpu",
    "spatial_pack_best_on_tuned_cpu",
    "spearman",
    "to_roman",
    "tuned_sparse_faster_than_dense_on_cifar10_not_imagenet",
    "tuning_accelerates_and_changes_best_choice",
    "weight_pruning_beats_channel_pruning_but_less_of_expected",
]
