"""A tiny CNN option for fast runner tests (registered by the test suite only)."""

from __future__ import annotations

import torch
from torch import nn

from dlas.registry import NoParams, register


class TinyCNN(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU())
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.pw = nn.Conv2d(8, 8, 1, bias=True)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + torch.relu(self.pw(self.dw(x)))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


@register("models", "tiny_cnn", description="test-only three-conv CNN")
def tiny_cnn(params: NoParams, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
    return TinyCNN(num_classes)


@register("models", "tiny_cnn_twin",
          description="test-only: tiny_cnn under another name, for sweeps of two models")
def tiny_cnn_twin(params: NoParams, num_classes: int,
                  input_shape: tuple[int, ...]) -> nn.Module:
    return TinyCNN(num_classes)
