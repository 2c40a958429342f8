"""The models dlas ships (layer 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register

if TYPE_CHECKING:
    from torch import nn


class CifarModelParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width_multiplier: float = Field(
        1.0, gt=0, le=4, description="scales every layer's channels; 1.0 is the paper's model")


def _check_cifar_input(name: str, input_shape: tuple[int, ...]) -> None:
    if tuple(input_shape)[0] != 3:
        raise ValueError(f"{name} expects 3-channel images, the dataset gives {input_shape}")


@register("models", "resnet18", params=CifarModelParams,
          description="CIFAR ResNet18 (paper: 11.2M params, 557M MACs at 32x32)")
def resnet18(params: CifarModelParams, num_classes: int,
             input_shape: tuple[int, ...]) -> nn.Module:
    from dlas.models.cifar.resnet import resnet18 as build

    _check_cifar_input("resnet18", input_shape)
    return build(num_classes=num_classes, width_multiplier=params.width_multiplier)


@register("models", "mobilenetv2", params=CifarModelParams,
          description="CIFAR MobileNetV2 (paper: 2.3M params, 98M MACs at 32x32)")
def mobilenetv2(params: CifarModelParams, num_classes: int,
                input_shape: tuple[int, ...]) -> nn.Module:
    from dlas.models.cifar.mobilenetv2 import mobilenetv2 as build

    _check_cifar_input("mobilenetv2", input_shape)
    return build(num_classes=num_classes, width_multiplier=params.width_multiplier)
