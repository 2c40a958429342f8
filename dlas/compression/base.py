"""The contract of a compression option (layer 3).

A compression option is `fn(params, model, ctx) -> CompressionResult`. It receives a copy
of the trained dense model, may fine-tune it through `ctx`, and returns the compressed
model plus facts about it (its sparsity, the levels it tried, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dlas.datasets.base import DatasetBundle
from dlas.sweep.config import Budgets

if TYPE_CHECKING:
    from dlas.models.training import FitSettings


@dataclass
class CompressionContext:
    bundle: DatasetBundle
    budgets: Budgets
    dense_accuracy: float
    #: Batch size, data fraction, seed, a checkpoint dir that survives interruptions
    #: (so fine-tuning resumes mid-way) and per-epoch progress reporting.
    fit_settings: FitSettings
    evaluate: Callable[[torch.nn.Module], float] = field(repr=False)
    #: `fine_tune(model, epochs)`: the training recipe at the sweep's fine-tuning LR.
    fine_tune: Callable[[torch.nn.Module, int], torch.nn.Module] = field(repr=False)


@dataclass
class CompressionResult:
    model: torch.nn.Module
    #: JSON-serializable facts stored with the result (e.g. {"levels": [...]}).
    info: dict[str, Any] = field(default_factory=dict)
