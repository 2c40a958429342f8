"""The offline default dataset: scikit-learn's 8x8 ``digits``, reshaped to look like CIFAR.

It ships inside scikit-learn, so the quickstart needs no network. Images are upsampled to
3x32x32 so the CIFAR models run on it unchanged.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Subset, TensorDataset

from dlas.datasets.base import DatasetBundle

NAME = "digits"
NUM_CLASSES = 10
INPUT_SHAPE = (3, 32, 32)
_PIXEL_MAX = 16.0  # digits pixels are integers in [0, 16]


def _to_images(pixels: np.ndarray, size: int) -> torch.Tensor:
    """(N, 64) ints in [0, 16] -> (N, 3, size, size) floats in [0, 1]."""
    images = torch.as_tensor(pixels, dtype=torch.float32).reshape(-1, 1, 8, 8) / _PIXEL_MAX
    images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    return images.clamp_(0.0, 1.0).expand(-1, 3, -1, -1).contiguous()


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
    # imported here: scikit-learn (with SciPy) takes 1.5 s to import on a Zen 3, and every
    # process that registers the plugins (timing workers, compile helpers) imports this
    # module without loading the data
    from sklearn.datasets import load_digits as _sklearn_load_digits
    from sklearn.model_selection import train_test_split

    raw = _sklearn_load_digits()
    pixels, labels = raw.data, raw.target.astype(np.int64)
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)),
        test_size=test_fraction,
        random_state=seed,
        stratify=labels,
    )
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
