"""The contract of a compression option (layer 3).

A compression option is `fn(params, model, ctx) -> CompressionResult`. It receives a copy
of the trained dense model, may fine-tune it through `ctx`, and returns the compressed
model plus facts about it (its sparsity, the levels it tried, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dlas.datasets.base import DatasetBundle
from dlas.sweep.config import Budgets


@dataclass
class CompressionContext:
    bundle: DatasetBundle
    budgets: Budgets
    dense_accuracy: float
    #: Survives interruptions: put fine-tuning checkpoints here to resume mid-way.
    scratch_dir: Path
    progress: bool = True
    #: Report a finished fine-tuning epoch `(history_row, total_epochs)`; shows progress.
    on_epoch: Callable[[dict[str, Any], int], None] | None = field(repr=False, default=None)
    evaluate: Callable[[torch.nn.Module], float] = field(repr=False, default=lambda m: 0.0)
    fine_tune: Callable[..., torch.nn.Module] = field(repr=False, default=lambda m, **k: m)


@dataclass
class CompressionResult:
    model: torch.nn.Module
    #: JSON-serializable facts stored with the result (e.g. {"levels": [...]}).
    info: dict[str, Any] = field(default_factory=dict)
