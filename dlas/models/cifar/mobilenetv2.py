"""MobileNetV2 for 32x32 inputs, as in kuangliu/pytorch-cifar (the paper's 2.3M / 98M).

Differences from the ImageNet network, all from that reference: stride 1 in the stem and in
the second stage (so 32x32 is not reduced too early), ReLU instead of ReLU6, and a
projection shortcut on stride-1 blocks whose channel count changes.
"""

from __future__ import annotations

import torch
from torch import nn

from dlas.models.cifar.resnet import scale_channels

# (expansion, out_channels, num_blocks, stride)
CONFIG: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 1),  # stride 2 in the ImageNet network
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> project (1x1), with a residual on stride 1."""

    def __init__(self, in_planes: int, out_planes: int, expansion: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        planes = expansion * in_planes
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(
            planes, planes, 3, stride=stride, padding=1, groups=planes, bias=False
        )
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride == 1 and in_planes != out_planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, out_planes, 1, bias=False),
                nn.BatchNorm2d(out_planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.stride == 1:
            out = out + self.shortcut(x)
        return out


class MobileNetV2(nn.Module):
    def __init__(
        self,
        num_classes: int = 10,
        width_multiplier: float = 1.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        stem = scale_channels(32, width_multiplier)
        # The head is scaled too (unlike the ImageNet paper's rule), so narrow variants
        # are cheap everywhere, which is what the quickstart wants.
        head = scale_channels(1280, width_multiplier)
        self.conv1 = nn.Conv2d(in_channels, stem, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        blocks: list[nn.Module] = []
        in_planes = stem
        for expansion, out_channels, num_blocks, stride in CONFIG:
            out_planes = scale_channels(out_channels, width_multiplier)
            for s in [stride] + [1] * (num_blocks - 1):
                blocks.append(InvertedResidual(in_planes, out_planes, expansion, s))
                in_planes = out_planes
        self.layers = nn.Sequential(*blocks)
        self.conv2 = nn.Conv2d(in_planes, head, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(head)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(head, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.layers(out)
        out = self.relu(self.bn2(self.conv2(out)))
        out = torch.flatten(self.pool(out), 1)
        return self.linear(out)


def mobilenetv2(num_classes: int = 10, width_multiplier: float = 1.0) -> MobileNetV2:
    """CIFAR MobileNetV2: 2.3M parameters and 98M MACs at width 1.0 (paper, Table 2)."""
    return MobileNetV2(num_classes=num_classes, width_multiplier=width_multiplier)
