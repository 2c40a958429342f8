"""An out-of-tree compression option: zero every conv weight below a share of its layer's
largest magnitude. Registered through the `dlas.plugins` entry point, like the built-ins."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from dlas.compression.base import CompressionContext, CompressionResult
from dlas.registry import register


class ThresholdParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    threshold: float = Field(0.5, gt=0, lt=1, description="share of each layer's max |w|")


@register("compression", "magnitude_threshold", params=ThresholdParams, tags={"sparse"},
          description="per-layer magnitude threshold pruning of conv weights (example plugin)")
def magnitude_threshold(params: ThresholdParams, model: torch.nn.Module,
                        ctx: CompressionContext) -> CompressionResult:
    zeroed = total = 0
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d):
                w = module.weight
                mask = w.abs() >= params.threshold * w.abs().max()
                w.mul_(mask)
                zeroed += int((~mask).sum())
                total += w.numel()
    return CompressionResult(model, {"zeroed": zeroed, "conv_weights": total})
