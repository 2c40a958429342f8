"""ImageNet (ILSVRC2012) validation images as an ImageFolder, for evaluating pretrained models.

Layout: ``<root>/val/<wnid>/<image>.JPEG`` (``root`` may also be the ``val`` folder itself),
one folder per class named by its WordNet id (``n01440764`` ...), as torchvision's
``ImageNet`` and most ImageNet copies arrange it. Class indices are the sorted folder names,
which is the order torchvision's pretrained models use, provided all 1000 folders are there.

ImageNet here is evaluation-only: the paper takes pretrained models and never trains on
ImageNet in this project (the training set is 140 GB). The validation images are split per
class, deterministically from the seed, into

- ``calibration``: ``heldout_per_class`` images per class, for int8 calibration (the paper
  calibrated on the validation set; holding these out keeps them apart from the test);
- ``test``: ``images_per_class`` of the remaining images per class (all of them by default);
- ``train``: by default a dataset that raises :class:`EvaluationOnlyError` when used, so
  fine-tuning (pruning with fine-tuning epochs) fails with a clear message instead of
  training on test images; with ``allow_finetune`` it is the held-out calibration images
  with training augmentation: disjoint from the test, but small, so only a sketch of the
  paper's ImageNet fine-tuning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import Dataset

from dlas._compat import import_torchvision
from dlas.datasets.base import DatasetBundle, DatasetNotFoundError, EvaluationOnlyError

NAME = "imagenet"
INPUT_SHAPE = (3, 224, 224)
RESIZE = 256
CROP = 224
# torchvision's ImageNet statistics, which its pretrained models were trained with.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SPLIT = "val"
LAYOUT = "<root>/val/<wnid>/<image>.JPEG (e.g. <root>/val/n01440764/ILSVRC2012_val_00000293.JPEG)"
_WNID = re.compile(r"^n\d{8}$")


def _val_dir(root: Path) -> Path:
    """``<root>/val`` when it exists, else ``root`` itself if it holds class folders."""
    if (root / SPLIT).is_dir():
        return root / SPLIT
    if root.is_dir() and any(p.is_dir() and _WNID.match(p.name) for p in root.iterdir()):
        return root
    return root / SPLIT


def _not_found(root: Path, folder: Path, what: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"ImageNet validation images not found: {what}. Expected layout: {LAYOUT}, one folder "
        f"per class named by its WordNet id (all 1000 for pretrained accuracy). Looked in "
        f"{folder}. To provide it: extract ILSVRC2012_img_val.tar and sort the images into "
        f"class folders (torchvision.datasets.ImageNet(root, split='val') does this from the "
        f"devkit), then set the dataset's `root` in the sweep config to the folder that "
        f"contains `val` (now: {root})."
    )


def imagenet_transforms(
    interpolation: Literal["bilinear", "bicubic"] = "bilinear",
) -> tuple[Callable[[Any], torch.Tensor], Callable[[Any], torch.Tensor]]:
    """(train, eval) transforms: torchvision's standard ImageNet ones.

    Eval: resize the short side to 256, center-crop 224, normalize. EfficientNet-B0's
    published accuracy was measured with bicubic resizing, the others with bilinear.
    """
    transforms = import_torchvision().transforms
    mode = transforms.InterpolationMode(interpolation)
    normalize = transforms.Normalize(MEAN, STD)
    train = transforms.Compose([
        transforms.RandomResizedCrop(CROP, interpolation=mode),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        normalize,
    ])
    test = transforms.Compose([
        transforms.Resize(RESIZE, interpolation=mode),
        transforms.CenterCrop(CROP),
        transforms.ToTensor(),
        normalize,
    ])
    return train, test


class ImageSubset(Dataset):
    """Chosen images of an ImageFolder, each loaded and transformed on access."""

    def __init__(self, folder: Any, indices: list[int], transform: Callable[[Any], Any]):
        self.folder = folder
        self.indices = indices
        self.transform = transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.folder.samples[self.indices[index]]
        return self.transform(self.folder.loader(path)), int(label)

    @property
    def paths(self) -> list[str]:
        return [self.folder.samples[i][0] for i in self.indices]


class EvaluationOnly(Dataset):
    """Stands in for a training set that is not there; any use raises a clear error."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __len__(self) -> int:
        raise EvaluationOnlyError(self.message)

    def __getitem__(self, index: int) -> Any:
        raise EvaluationOnlyError(self.message)


def split_per_class(
    targets: list[int], num_classes: int, heldout: int, per_class: int | None, seed: int
) -> tuple[list[int], list[int]]:
    """(held-out, test) sample indices: per class, a seeded permutation gives the first
    ``heldout`` to calibration and the next ``per_class`` (or the rest) to test."""
    by_class: list[list[int]] = [[] for _ in range(num_classes)]
    for index, label in enumerate(targets):
        by_class[label].append(index)
    generator = torch.Generator().manual_seed(seed)
    held, test = [], []
    for label, members in enumerate(by_class):
        wanted = heldout + (per_class or 1)
        if len(members) < wanted:
            raise ValueError(
                f"ImageNet class {label} has {len(members)} images; "
                f"{heldout} held out plus {per_class or 'at least 1'} for the test need {wanted}. "
                f"Lower images_per_class or heldout_per_class."
            )
        order = torch.randperm(len(members), generator=generator).tolist()
        chosen = [members[i] for i in order]
        held += chosen[:heldout]
        stop = heldout + per_class if per_class is not None else len(chosen)
        test += chosen[heldout:stop]
    return sorted(held), sorted(test)


def load_imagenet(
    root: str | os.PathLike[str],
    *,
    images_per_class: int | None = None,
    heldout_per_class: int = 1,
    allow_finetune: bool = False,
    interpolation: Literal["bilinear", "bicubic"] = "bilinear",
    seed: int = 0,
) -> DatasetBundle:
    """The ImageNet validation set from ``root`` as a bundle (module docstring: the splits)."""
    if images_per_class is not None and images_per_class < 1:
        raise ValueError(f"images_per_class must be at least 1, got {images_per_class}")
    if heldout_per_class < 0:
        raise ValueError(f"heldout_per_class must be at least 0, got {heldout_per_class}")
    if allow_finetune and heldout_per_class == 0:
        raise ValueError("allow_finetune fine-tunes on the held-out images: "
                         "set heldout_per_class to at least 1")
    root_path = Path(root).expanduser()
    folder = _val_dir(root_path)
    if not folder.is_dir():
        raise _not_found(root_path, folder, f"{folder} does not exist")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        loose = sum(1 for p in folder.iterdir() if p.is_file())
        raise _not_found(root_path, folder, f"{folder} has no class folders"
                         + (f" ({loose} loose files: the images are not sorted into class "
                            f"folders yet)" if loose else ""))
    tv = import_torchvision()
    try:
        images = tv.datasets.ImageFolder(str(folder))
    except FileNotFoundError as err:  # a class folder without any image
        raise _not_found(root_path, folder, str(err)) from err

    held, test = split_per_class(images.targets, len(images.classes), heldout_per_class,
                                 images_per_class, seed)
    train_tf, test_tf = imagenet_transforms(interpolation)
    calibration = ImageSubset(images, held, test_tf) if held else None
    if allow_finetune:
        train: Dataset = ImageSubset(images, held, train_tf)
    else:
        train = EvaluationOnly(
            f"the imagenet dataset ({folder}) is evaluation-only: it has no training split, so "
            f"models cannot be trained or fine-tuned on it (ImageNet models are pretrained; "
            f"use compression without fine-tuning, e.g. finetune_epochs: 0). To fine-tune on "
            f"the {heldout_per_class} held-out validation images per class (disjoint from the "
            f"test images), set `allow_finetune: true` for the dataset."
        )
    return DatasetBundle(
        name=NAME,
        train=train,
        test=ImageSubset(images, test, test_tf),
        num_classes=len(images.classes),
        input_shape=INPUT_SHAPE,
        calibration=calibration,
    )
