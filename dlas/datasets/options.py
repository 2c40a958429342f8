"""The datasets dlas ships (layer 1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register

if TYPE_CHECKING:
    from dlas.datasets.base import DatasetBundle


class DigitsParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="held-out test share")


@register("datasets", "digits", params=DigitsParams,
          description="scikit-learn digits (offline), upsampled to 3x32x32 so CIFAR models "
                      "run unchanged")
def digits(params: DigitsParams, seed: int = 0) -> DatasetBundle:
    from dlas.datasets.digits import load_digits

    return load_digits(test_fraction=params.test_fraction, seed=seed)


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
