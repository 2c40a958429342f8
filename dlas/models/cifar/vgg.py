"""VGG-16 for 32x32 inputs, as in kuangliu/pytorch-cifar (the paper's 14.7M / 314M).

The CIFAR variant keeps VGG-16's thirteen 3x3 convolutions (each with bias, BatchNorm and
ReLU) and five max-pools, which leave 1x1x512 at 32x32, and replaces the three large
fully connected layers of the ImageNet network with one 512 -> classes layer.
"""

from __future__ import annotations

import torch
from torch import nn

from dlas.models.cifar.resnet import scale_channels

# Output channels of each 3x3 conv; "M" is a 2x2 max-pool.
VGG16_CONFIG: tuple[int | str, ...] = (
    64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
)


class VGG(nn.Module):
    def __init__(
        self,
        config: tuple[int | str, ...] = VGG16_CONFIG,
        num_classes: int = 10,
        width_multiplier: float = 1.0,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels
        for item in config:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                continue
            out = scale_channels(int(item), width_multiplier)
            # Bias kept although BatchNorm follows: it is in the reference definition and in
            # the paper's parameter count.
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.BatchNorm2d(out),
                       nn.ReLU(inplace=True)]
            channels = out
        self.features = nn.Sequential(*layers)
        # 1x1 already at 32x32; adaptive so other sizes still reach the classifier.
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.flatten(self.pool(self.features(x)), 1)
        return self.classifier(out)


def vgg16(num_classes: int = 10, width_multiplier: float = 1.0) -> VGG:
    """CIFAR VGG-16: 14.7M parameters and 314M MACs at width 1.0 (paper, Table 2)."""
    return VGG(VGG16_CONFIG, num_classes=num_classes, width_multiplier=width_multiplier)
