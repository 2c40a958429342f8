"""The models dlas ships (layer 2).

CIFAR models (32x32, trained from scratch by the runner) and ImageNet models (torchvision's,
tagged ``imagenet`` and ``pretrained``: the runner does not train them; it evaluates them
when ``model.dlas_pretrained`` and records accuracy as unavailable otherwise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register

if TYPE_CHECKING:
    from torch import nn

#: Dataset tag that marks 224x224, 1000-class ImageNet data (dlas/datasets/options.py).
IMAGENET_TAG = "imagenet"
CIFAR_INPUT = (3, 32, 32)
#: Each CIFAR model's total downsampling: the smallest image side that leaves its last stage
#: a map of at least 1x1 (VGG-16's fifth max-pool needs 32; ResNet18 and MobileNetV2 reduce
#: by 8, MobileNetV1 by 16). Smaller images than CIFAR's 32 make the same network cheaper
#: to train and time (the quickstart's digits are 8x8 images upsampled).
CIFAR_MIN_SIDE: dict[str, int] = {"resnet18": 8, "mobilenetv2": 8, "mobilenetv1": 16,
                                  "vgg16": 32}


class CifarModelParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    width_multiplier: float = Field(
        1.0, gt=0, le=4, description="scales every layer's channels; 1.0 is the paper's model")


def _check_cifar_input(name: str, input_shape: tuple[int, ...]) -> None:
    """A CIFAR model takes 3-channel images from its minimum side (`CIFAR_MIN_SIDE`) up to
    CIFAR's 32x32; larger images are ImageNet's models' business."""
    shape = tuple(input_shape)
    least = CIFAR_MIN_SIDE.get(name, CIFAR_INPUT[1])
    if (len(shape) != 3 or shape[0] != 3
            or not all(least <= side <= CIFAR_INPUT[1] for side in shape[1:])):
        raise ValueError(
            f"{name} is a CIFAR model, built for 3-channel images of {least}x{least} to 32x32; "
            f"the dataset gives {'x'.join(map(str, shape))}. Use an ImageNet model (resnet50, "
            f"densenet161, efficientnet_b0, mobilenetv2_imagenet) for ImageNet-sized data, or "
            f"a larger image_size for this one."
        )


def _cifar_dataset_only(point: Any) -> str | None:
    """CIFAR models run on CIFAR-sized data: not ImageNet's, and not images smaller than
    the model's total downsampling. The side is the dataset option's `image_size` where it
    has one (digits); the model checks the real shape again when it is built."""
    if IMAGENET_TAG in point.datasets.tags:
        return (f"'{point.models.name}' is a CIFAR model (32x32 input) and cannot run on the "
                f"ImageNet dataset '{point.datasets.name}'; use an ImageNet model")
    side = getattr(point.datasets.params, "image_size", None)
    least = CIFAR_MIN_SIDE.get(point.models.name, CIFAR_INPUT[1])
    if isinstance(side, int) and not least <= side <= CIFAR_INPUT[1]:
        return (f"'{point.models.name}' takes images of {least}x{least} to 32x32 and dataset "
                f"'{point.datasets.name}' gives {side}x{side}; set its image_size to "
                f"{least} or more, or exclude {point.models.name} on it")
    return None


def _imagenet_dataset_only(point: Any) -> str | None:
    if IMAGENET_TAG not in point.datasets.tags:
        return (f"'{point.models.name}' is an ImageNet model (224x224, pretrained on ImageNet) "
                f"and needs an ImageNet dataset, not '{point.datasets.name}'")
    return None


def _cifar(name: str, paper: str) -> Callable[[Callable[..., nn.Module]], Callable[..., Any]]:
    return register("models", name, params=CifarModelParams, constraints=[_cifar_dataset_only],
                    tags={"cifar"}, description=f"CIFAR {paper} at 32x32")


@_cifar("resnet18", "ResNet18 (paper: 11.2M params, 557M MACs)")
def resnet18(params: CifarModelParams, num_classes: int,
             input_shape: tuple[int, ...]) -> nn.Module:
    from dlas.models.cifar.resnet import resnet18 as build

    _check_cifar_input("resnet18", input_shape)
    return build(num_classes=num_classes, width_multiplier=params.width_multiplier)


@_cifar("mobilenetv2", "MobileNetV2 (paper: 2.3M params, 98M MACs)")
def mobilenetv2(params: CifarModelParams, num_classes: int,
                input_shape: tuple[int, ...]) -> nn.Module:
    from dlas.models.cifar.mobilenetv2 import mobilenetv2 as build

    _check_cifar_input("mobilenetv2", input_shape)
    return build(num_classes=num_classes, width_multiplier=params.width_multiplier)


@_cifar("mobilenetv1", "MobileNetV1 (paper: 3.2M params, 48M MACs)")
def mobilenetv1(params: CifarModelParams, num_classes: int,
                input_shape: tuple[int, ...]) -> nn.Module:
    from dlas.models.cifar.mobilenetv1 import mobilenetv1 as build

    _check_cifar_input("mobilenetv1", input_shape)
    return build(num_classes=num_classes, width_multiplier=params.width_multiplier)


@_cifar("vgg16", "VGG-16 (paper: 14.7M params, 314M MACs)")
def vgg16(params: CifarModelParams, num_classes: int,
          input_shape: tuple[int, ...]) -> nn.Module:
    from dlas.models.cifar.vgg import vgg16 as build

    _check_cifar_input("vgg16", input_shape)
    return build(num_classes=num_classes, width_multiplier=params.width_multiplier)


class ImageNetModelParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weights: str | None = Field(
        None, description="state-dict file to load; default: torchvision's checkpoint in "
                          "$TORCH_HOME/hub/checkpoints if present, else random init")
    require_weights: bool = Field(
        False, description="fail when no weights are found instead of running randomly "
                           "initialized (timing only, accuracy unavailable)")


def _register_imagenet(name: str, description: str) -> None:
    def build(params: ImageNetModelParams, num_classes: int,
              input_shape: tuple[int, ...]) -> nn.Module:
        from dlas.models.imagenet import build_imagenet_model

        return build_imagenet_model(name, num_classes=num_classes, input_shape=input_shape,
                                    weights=params.weights,
                                    require_weights=params.require_weights)

    def weights(params: ImageNetModelParams) -> dict[str, Any] | None:
        """The checkpoint a build would load (path, size, mtime), hashed into the train
        key: the parameters alone do not say whether torchvision's checkpoint has
        appeared in the hub cache since a random-init model was cached."""
        from dlas.models.imagenet import weights_identity

        return weights_identity(name, params.weights)

    build.__name__ = build.__qualname__ = name
    register("models", name, params=ImageNetModelParams, tags={IMAGENET_TAG, "pretrained"},
             constraints=[_imagenet_dataset_only], key_facts=weights,
             description=f"ImageNet {description}; torchvision's, with its IMAGENET1K_V1 "
                         "weights when found")(build)


# Paper, Table 5: parameters, MACs (thop convention) and the checkpoints' top-1.
_register_imagenet("resnet50", "ResNet50 (paper: 25.6M params, 4.1G MACs, 76.1%)")
_register_imagenet("densenet161", "DenseNet161 (paper: 27.7M params, 7.8G MACs, 77.1%)")
_register_imagenet("efficientnet_b0", "EfficientNet-B0 (paper: 5.3M params, 415M MACs, 77.7%)")
_register_imagenet("mobilenetv2_imagenet", "MobileNetV2 (paper: 3.5M params, 327M MACs, 71.9%)")
