"""The offline default dataset: scikit-learn's 8x8 ``digits``, reshaped to look like CIFAR.

It ships inside scikit-learn, so the quickstart needs no network. Images are upsampled to
3x32x32 so the CIFAR models run on it unchanged.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Subset, TensorDataset

from dlas.datasets.base import DatasetBundle
from dlas.datasets.stratified_split import stratified_split

NAME = "digits"
NUM_CLASSES = 10
INPUT_SHAPE = (3, 32, 32)
_PIXEL_MAX = 16.0  # digits pixels are integers in [0, 16]


def _to_images(pixels: np.ndarray, size: int) -> torch.Tensor:
    """(N, 64) ints in [0, 16] -> (N, 3, size, size) floats in [0, 1]."""
    images = torch.as_tensor(pixels, dtype=torch.float32).reshape(-1, 1, 8, 8) / _PIXEL_MAX
    images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    return images.clamp_(0.0, 1.0).expand(-1, 3, -1, -1).contiguous()


def digits_pixels_and_labels() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as `sklearn.datasets.load_digits` reads them: (1797, 64)
    pixels and int64 labels, from the file scikit-learn ships, found without importing
    scikit-learn (with SciPy, 1.3-2.3 s of one core on a Zen 3; `stratified_split`)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("scikit-learn is not installed: the digits dataset ships "
                                "with it (pip install scikit-learn)")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, mode="rt", encoding="utf-8") as text:
        data = np.loadtxt(text, delimiter=",")
    return data[:, :-1], data[:, -1].astype(np.int64)


def load_digits(
    *,
    test_fraction: float = 0.2,
    seed: int = 0,
    image_size: int = 32,
    calibration_size: int = 128,
) -> DatasetBundle:
    """Build the digits bundle: a seeded, stratified train/test split (1437/360 by default).

    Normalization uses the training split's mean and std (one value; the grey level is the
    same on all three channels), so no statistic leaks from the test images.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    pixels, labels = digits_pixels_and_labels()
    train_idx, test_idx = stratified_split(labels, test_fraction, seed)
    train_x = _to_images(pixels[train_idx], image_size)
    test_x = _to_images(pixels[test_idx], image_size)
    mean, std = train_x.mean(), train_x.std()
    train_x = (train_x - mean) / std
    test_x = (test_x - mean) / std

    train = TensorDataset(train_x, torch.as_tensor(labels[train_idx]))
    test = TensorDataset(test_x, torch.as_tensor(labels[test_idx]))
    calibration = None
    if calibration_size > 0:
        generator = torch.Generator().manual_seed(seed)
        chosen = torch.randperm(len(train), generator=generator)[:calibration_size]
        calibration = Subset(train, chosen.tolist())
    return DatasetBundle(
        name=NAME,
        train=train,
        test=test,
        num_classes=NUM_CLASSES,
        input_shape=(3, image_size, image_size),
        calibration=calibration,
    )
