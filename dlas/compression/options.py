"""The compression options dlas ships (layer 3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlas.registry import NoParams, register

if TYPE_CHECKING:
    from torch import nn

    from dlas.compression.base import CompressionContext, CompressionResult


@register("compression", "none", description="the dense trained model, unchanged")
def no_compression(params: NoParams, model: nn.Module,
                   ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult

    return CompressionResult(model)


class WeightPruningParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sparsity: float = Field(0.9, gt=0, lt=1, description="final share of zero conv weights")
    steps: list[float] | None = Field(
        None, description="iterative levels ending at `sparsity` (default: one step)")

    @model_validator(mode="after")
    def _steps_reach_sparsity(self) -> WeightPruningParams:
        if self.steps is not None:
            if not self.steps or any(not 0 < s < 1 for s in self.steps):
                raise ValueError("steps must be non-empty levels in (0, 1)")
            if sorted(self.steps) != self.steps or self.steps[-1] != self.sparsity:
                raise ValueError(f"steps must increase and end at sparsity={self.sparsity}")
        return self


@register("compression", "weight_pruning", params=WeightPruningParams, tags={"sparse"},
          description="global L1 unstructured pruning of conv weights, fine-tuned between "
                      "steps (the paper's 'weight pruning')")
def weight_pruning(params: WeightPruningParams, model: nn.Module,
                   ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult
    from dlas.compression.pruning import iterative_weight_pruning

    levels = params.steps or [params.sparsity]
    model, records = iterative_weight_pruning(
        model, ctx.bundle, levels, ctx.budgets.finetune_epochs, lr=ctx.budgets.finetune_lr,
        settings=ctx.fit_settings,
    )
    return CompressionResult(model, {"levels": records})
