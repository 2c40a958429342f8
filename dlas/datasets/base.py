"""What every dataset option hands to the rest of the stack."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import Dataset


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not where we looked; the message says where and how to fix it.

    A FileNotFoundError so callers that only know the standard library still catch it.
    """


class EvaluationOnlyError(RuntimeError):
    """Training or fine-tuning was asked of a dataset that has no training split."""


@dataclass
class DatasetBundle:
    """Train/test splits plus the facts models and compilers need (classes, input shape).

    ``calibration`` is a fixed slice of images disjoint from ``test`` (the training images,
    or for evaluation-only ImageNet a held-out slice of the validation images), served with
    the test-time transform (no augmentation), kept for post-training int8 calibration.
    """

    name: str
    train: Dataset
    test: Dataset
    num_classes: int
    input_shape: tuple[int, int, int]
    calibration: Dataset | None = None


def _input_of(item: object) -> torch.Tensor:
    if isinstance(item, tuple | list):
        item = item[0]
    if not isinstance(item, torch.Tensor):
        raise TypeError(f"dataset items must be tensors or (tensor, label); got {type(item)}")
    return item


def fixed_batch(dataset: Dataset, n: int, seed: int | None = 0) -> torch.Tensor:
    """Stack ``n`` inputs picked reproducibly, so every compiled variant is verified on the
    same data.

    With ``seed=None`` the first ``n`` items are taken; otherwise a seeded permutation
    chooses them. Labels are dropped. Use a dataset without random augmentation (test or
    calibration), or the batch will not be reproducible.
    """
    size = len(dataset)  # type: ignore[arg-type]
    if not 0 < n <= size:
        raise ValueError(f"n must be in [1, {size}], got {n}")
    if seed is None:
        indices = list(range(n))
    else:
        generator = torch.Generator().manual_seed(seed)
        indices = torch.randperm(size, generator=generator)[:n].tolist()
    return torch.stack([_input_of(dataset[i]) for i in indices])
