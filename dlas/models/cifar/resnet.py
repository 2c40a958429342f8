"""ResNet18 for 32x32 inputs (as in kuangliu/pytorch-cifar, which the paper's numbers match).

The ImageNet stem (7x7 stride-2 conv + max-pool) would shrink a 32x32 image to 8x8 before
the first block, so CIFAR ResNets use a 3x3 stride-1 stem and no max-pool.
"""

from __future__ import annotations

import torch
from torch import nn


def scale_channels(channels: int, width_multiplier: float) -> int:
    """Channel count under a width multiplier; never below one channel."""
    if width_multiplier <= 0:
        raise ValueError(f"width_multiplier must be positive, got {width_multiplier}")
    return max(1, int(round(channels * width_multiplier)))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(
        self,
        num_blocks: tuple[int, int, int, int] = (2, 2, 2, 2),
        num_classes: int = 10,
        width_multiplier: float = 1.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        widths = [scale_channels(c, width_multiplier) for c in (64, 128, 256, 512)]
        self.in_planes = widths[0]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(widths[0], num_blocks[0], stride=1)
        self.layer2 = self._make_layer(widths[1], num_blocks[1], stride=2)
        self.layer3 = self._make_layer(widths[2], num_blocks[2], stride=2)
        self.layer4 = self._make_layer(widths[3], num_blocks[3], stride=2)
        # Adaptive pooling equals kuangliu's avg_pool2d(4) at 32x32 and still works on other
        # input sizes.
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(widths[3] * BasicBlock.expansion, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int) -> nn.Sequential:
        layers = []
        for s in [stride] + [1] * (blocks - 1):
            layers.append(BasicBlock(self.in_planes, planes, s))
            self.in_planes = planes * BasicBlock.expansion
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = torch.flatten(self.pool(out), 1)
        return self.linear(out)


def resnet18(num_classes: int = 10, width_multiplier: float = 1.0) -> ResNet:
    """CIFAR ResNet18: 11.2M parameters and 557M MACs at width 1.0 (paper, Table 2)."""
    return ResNet((2, 2, 2, 2), num_classes=num_classes, width_multiplier=width_multiplier)
