"""CIFAR-10 from torchvision's on-disk format (``<root>/cifar-10-batches-py``).

There is no network on most machines this runs on, so nothing is downloaded unless asked;
missing files raise :class:`DatasetNotFoundError` with instructions instead of
torchvision's generic "not found or corrupted".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from dlas._compat import import_torchvision
from dlas.datasets.base import DatasetBundle, DatasetNotFoundError

NAME = "cifar10"
NUM_CLASSES = 10
INPUT_SHAPE = (3, 32, 32)
BASE_FOLDER = "cifar-10-batches-py"
FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta")
# The usual CIFAR-10 per-channel statistics (training set).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def _batches_dir(root: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(root as torchvision wants it, the batches folder); accepts either path."""
    path = Path(root).expanduser()
    if path.name == BASE_FOLDER:
        return path.parent, path
    return path, path / BASE_FOLDER


def _not_found(folder: Path, missing: list[str]) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"CIFAR-10 not found: looked in {folder} and did not find {', '.join(missing)}. "
        "To provide it: (a) on a machine with network access, load it once with "
        "download=True (or set `download: true` for the dataset in the sweep config); or "
        f"(b) copy an existing `{BASE_FOLDER}` folder (data_batch_1..5, test_batch, "
        f"batches.meta) to {folder}; or (c) set the dataset's `root` in the sweep config to "
        f"the directory that contains `{BASE_FOLDER}`."
    )


class _Transformed(Dataset):
    """Applies a transform to a shared base dataset, so train and calibration views do not
    each hold a copy of the 150 MB of training images."""

    def __init__(self, base: Any, transform: Callable[[Any], Any], indices: list[int] | None):
        self.base = base
        self.transform = transform
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices) if self.indices is not None else len(self.base)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        if self.indices is not None:
            index = self.indices[index]
        image, label = self.base[index]
        return self.transform(image), int(label)


def _cifar_class(verify_md5: bool) -> type:
    tv = import_torchvision()
    cifar10 = tv.datasets.CIFAR10
    if verify_md5:
        return cifar10

    class _UncheckedCIFAR10(cifar10):  # type: ignore[misc, valid-type]
        # torchvision's check_integrity(path, md5=None) only checks that the file exists;
        # this is how data that is not the official release (tests, re-packed copies)
        # loads.
        train_list = [[name, None] for name, _ in cifar10.train_list]
        test_list = [[name, None] for name, _ in cifar10.test_list]
        meta = {**cifar10.meta, "md5": None}

    return _UncheckedCIFAR10


def cifar10_transforms() -> tuple[Callable[[Any], torch.Tensor], Callable[[Any], torch.Tensor]]:
    """(train, test) transforms: random crop (pad 4) and flip only for training."""
    transforms = import_torchvision().transforms
    normalize = transforms.Normalize(MEAN, STD)
    train = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            normalize,
        ]
    )
    test = transforms.Compose([transforms.ToTensor(), normalize])
    return train, test


def load_cifar10(
    root: str | os.PathLike[str],
    *,
    download: bool = False,
    verify_md5: bool = True,
    calibration_size: int = 1000,
    seed: int = 0,
) -> DatasetBundle:
    """Load CIFAR-10 from ``root`` (the directory holding ``cifar-10-batches-py``, or that
    folder itself).

    ``verify_md5=False`` skips torchvision's checksum of each file (it still requires all
    of them); the official release passes the check, anything else needs this.
    """
    tv_root, folder = _batches_dir(root)
    cls = _cifar_class(verify_md5)
    if download:
        # Downloads and extracts only when the files are absent or fail the checksum.
        try:
            cls(root=str(tv_root), train=True, download=True)
        except (OSError, RuntimeError) as err:  # URLError is an OSError
            raise DatasetNotFoundError(
                f"downloading CIFAR-10 into {folder} failed ({err}). Without network access, "
                f"copy an existing `{BASE_FOLDER}` folder to {folder} instead."
            ) from err
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise _not_found(folder, missing)
    try:
        train_base = cls(root=str(tv_root), train=True, transform=None)
        test_base = cls(root=str(tv_root), train=False, transform=None)
    except RuntimeError as err:  # torchvision's "not found or corrupted"
        raise DatasetNotFoundError(
            f"CIFAR-10 files in {folder} failed torchvision's md5 check ({err}). Replace them "
            "with the official release, or pass verify_md5=False to load them as they are."
        ) from err

    train_tf, test_tf = cifar10_transforms()
    calibration = None
    if calibration_size > 0:
        generator = torch.Generator().manual_seed(seed)
        size = min(calibration_size, len(train_base))
        chosen = torch.randperm(len(train_base), generator=generator)[:size].tolist()
        calibration = _Transformed(train_base, test_tf, chosen)
    return DatasetBundle(
        name=NAME,
        train=_Transformed(train_base, train_tf, None),
        test=_Transformed(test_base, test_tf, None),
        num_classes=NUM_CLASSES,
        input_shape=INPUT_SHAPE,
        calibration=calibration,
    )
