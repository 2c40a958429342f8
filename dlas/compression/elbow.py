"""Which pruning level a sweep uses: the paper's elbow, or a level fixed by the config.

The paper prunes iteratively to ever higher levels and, for inference, takes "the pruning
level which has the highest compression ratio before a significant accuracy drop (elbow
point) occurs". Here "significant" is a drop of more than ``max_drop`` (a fraction of
accuracy: 0.01 is one percentage point) below the dense model, and "before" means the
elbow is the last level of the leading run of levels that stay within it: a level that
recovers after an earlier one dropped is not chosen, since the drop already occurred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Accuracies are ratios of counts; without a tolerance 0.95 - 0.94 > 0.01 in floats.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Selection:
    """The chosen level's position in the schedule and why it was chosen."""

    index: int
    level: float
    #: "elbow", "level" (fixed for every model) or "level_by_model".
    selected_by: str
    #: Whether the chosen level's accuracy is within ``max_drop`` of the dense model
    #: (None when it was not checked: a fixed level, or no dense accuracy).
    within_drop: bool | None
    note: str


def within_drop(accuracy: float, dense_accuracy: float, max_drop: float) -> bool:
    """Whether ``accuracy`` is at most ``max_drop`` below ``dense_accuracy``."""
    return dense_accuracy - accuracy <= max_drop + _TOLERANCE


def elbow_index(accuracies: Sequence[float], dense_accuracy: float,
                max_drop: float) -> int | None:
    """Index of the last level in the leading run within ``max_drop`` of the dense
    accuracy; None when even the first level drops more."""
    if max_drop < 0:
        raise ValueError(f"max_drop must be >= 0, got {max_drop}")
    chosen = None
    for index, accuracy in enumerate(accuracies):
        if not within_drop(accuracy, dense_accuracy, max_drop):
            break
        chosen = index
    return chosen


def find_level(levels: Sequence[float], level: float) -> int | None:
    """Position of ``level`` in ``levels`` (compared with a float tolerance)."""
    for index, candidate in enumerate(levels):
        if math.isclose(candidate, level, rel_tol=0, abs_tol=_TOLERANCE):
            return index
    return None


def fixed_level(level: float | None, level_by_model: Mapping[str, float],
                model_name: str | None) -> tuple[float, str] | None:
    """The level the config fixes for this model, and which parameter fixed it."""
    if level_by_model:
        if not model_name:
            raise ValueError(
                "level_by_model needs the model option's name, which this compression "
                "context does not provide (CompressionContext.model_name)")
        if model_name in level_by_model:
            return level_by_model[model_name], "level_by_model"
    if level is not None:
        return level, "level"
    return None


def select_level(records: Sequence[Mapping[str, Any]], dense_accuracy: float | None,
                 max_drop: float, fixed: tuple[float, str] | None = None) -> Selection | None:
    """Choose among ``records`` (``{"level", "accuracy", ...}`` in schedule order).

    A ``fixed`` (level, parameter) wins; it returns None while that level is not among the
    records yet (the schedule calls this after every level). Otherwise the elbow; when no
    level stays within ``max_drop``, the lowest level, with a note saying so. Without a
    dense accuracy there is nothing to measure a drop from: the highest level is used.
    """
    if not records:
        raise ValueError("no pruning levels to choose from")
    levels = [float(r["level"]) for r in records]
    if fixed is not None:
        level, by = fixed
        index = find_level(levels, level)
        if index is None:
            return None
        return Selection(index, levels[index], by, None, f"level {level:g} fixed by `{by}`")
    if dense_accuracy is None:
        index = len(levels) - 1
        return Selection(index, levels[index], "elbow", None,
                         "no dense accuracy to measure a drop from: using the highest level")
    index = elbow_index([float(r["accuracy"]) for r in records], dense_accuracy, max_drop)
    if index is None:
        return Selection(0, levels[0], "elbow", False,
                         f"no level stays within {max_drop:g} of the dense accuracy "
                         f"{dense_accuracy:.4f}: using the lowest level {levels[0]:g}")
    return Selection(index, levels[index], "elbow", True,
                     f"elbow: highest level before accuracy fell more than {max_drop:g} "
                     f"below the dense {dense_accuracy:.4f}")


def ideal_speedup(level: float) -> float:
    """The speedup a pruning level promises, which dlas records as ``compression_ratio``
    (the paper: "95% pruning promises 20x"): ``1 / (1 - level)``."""
    if not 0 <= level < 1:
        raise ValueError(f"a pruning level must be in [0, 1), got {level}")
    return 1.0 / (1.0 - level)
