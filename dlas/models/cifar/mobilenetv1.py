"""MobileNetV1 for 32x32 inputs, as in kuangliu/pytorch-cifar (the paper's 3.2M / 48M).

Differences from the ImageNet network, from that reference: a stride-1 stem (ImageNet:
stride 2), so the five stride-2 blocks take 32x32 down to 2x2 before the pool.
"""

from __future__ import annotations

import torch
from torch import nn

from dlas.models.cifar.resnet import scale_channels

# (out_channels, stride) of each depthwise-separable block.
CONFIG: tuple[tuple[int, int], ...] = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)


class DepthwiseSeparable(nn.Module):
    """Depthwise 3x3 then pointwise 1x1, each followed by BatchNorm and ReLU."""

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, in_planes, 3, stride=stride, padding=1,
                               groups=in_planes, bias=False)
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv2 = nn.Conv2d(in_planes, out_planes, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)))


class MobileNetV1(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        width_multiplier: float = 1.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        stem = scale_channels(32, width_multiplier)
        self.conv1 = nn.Conv2d(in_channels, stem, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        blocks: list[nn.Module] = []
        in_planes = stem
        for out_channels, stride in CONFIG:
            out_planes = scale_channels(out_channels, width_multiplier)
            blocks.append(DepthwiseSeparable(in_planes, out_planes, stride))
            in_planes = out_planes
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)  # the reference's avg_pool2d(2) at 32x32
        self.linear = nn.Linear(in_planes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = torch.flatten(self.pool(self.layers(out)), 1)
        return self.linear(out)


def mobilenetv1(num_classes: int = 10, width_multiplier: float = 1.0) -> MobileNetV1:
    """CIFAR MobileNetV1: 3.2M parameters and 48M MACs at width 1.0 (paper, Table 2)."""
    return MobileNetV1(num_classes=num_classes, width_multiplier=width_multiplier)
