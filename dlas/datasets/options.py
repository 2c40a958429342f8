"""The datasets dlas ships (layer 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register

if TYPE_CHECKING:
    from dlas.datasets.base import DatasetBundle


class DigitsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="held-out test share")
    image_size: int = Field(
        32, ge=8, le=32,
        description="side the 8x8 images are upsampled to (CIFAR's 32 by default; 16 holds "
                    "the same information and makes training and timing about 4x cheaper)")


@register("datasets", "digits", params=DigitsParams,
          description="scikit-learn digits (offline), upsampled to 3x32x32 (image_size) so "
                      "CIFAR models run unchanged")
def digits(params: DigitsParams, seed: int = 0) -> DatasetBundle:
    from dlas.datasets.digits import load_digits

    return load_digits(test_fraction=params.test_fraction, seed=seed,
                       image_size=params.image_size)


class Cifar10Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    root: str = Field("data/cifar10", description="folder holding cifar-10-batches-py")
    download: bool = Field(False, description="download when absent (needs network)")
    verify_md5: bool = Field(True, description="check torchvision's checksums")


@register("datasets", "cifar10", params=Cifar10Params,
          description="CIFAR-10 (32x32, 10 classes) in torchvision's on-disk format")
def cifar10(params: Cifar10Params, seed: int = 0) -> DatasetBundle:
    from dlas.datasets.cifar10 import load_cifar10

    return load_cifar10(params.root, download=params.download, verify_md5=params.verify_md5,
                        seed=seed)


class ImageNetParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    root: str = Field("data/imagenet",
                      description="folder holding val/<wnid>/*.JPEG (or the val folder itself)")
    images_per_class: int | None = Field(
        None, ge=1, description="test on this many images per class (a seeded, fixed subset); "
                                "default: all not held out")
    heldout_per_class: int = Field(
        1, ge=0, description="validation images per class held out of the test for int8 "
                             "calibration")
    allow_finetune: bool = Field(
        False, description="let fine-tuning use the held-out images (otherwise training on "
                           "this evaluation-only dataset is an error)")
    interpolation: Literal["bilinear", "bicubic"] = Field(
        "bilinear", description="resize filter; EfficientNet-B0's published accuracy used "
                                "bicubic")


@register("datasets", "imagenet", params=ImageNetParams, tags={"imagenet"},
          description="ImageNet validation set (224x224, 1000 classes), evaluation-only: "
                      "resize 256, center-crop 224, ImageNet mean/std")
def imagenet(params: ImageNetParams, seed: int = 0) -> DatasetBundle:
    from dlas.datasets.imagenet import load_imagenet

    return load_imagenet(params.root, images_per_class=params.images_per_class,
                         heldout_per_class=params.heldout_per_class,
                         allow_finetune=params.allow_finetune,
                         interpolation=params.interpolation, seed=seed)
