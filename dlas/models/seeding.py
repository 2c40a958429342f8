"""Reproducible training: seeds, and every source of an epoch's randomness (the shuffle,
augmentation) derived from (seed, epoch), so that a run interrupted after epoch k and
resumed from its checkpoint ends with the same weights as one that never stopped."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, Subset


def seed_all(seed: int) -> None:
    """Seed torch, numpy and ``random``; call before building a model for reproducible
    initial weights."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of one epoch of a run seeded `seed`."""
    return (seed * 1_000_003 + epoch * 7_919 + 1) % 2**63


class EpochSeededSampler(Sampler[int]):
    """A shuffle that depends only on (seed, epoch), so resumed runs see the same order.

    Lightning calls ``set_epoch`` before each epoch.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
        yield from torch.randperm(self.size, generator=generator).tolist()

    def __len__(self) -> int:
        return self.size


def train_subset(dataset: Dataset, fraction: float, seed: int) -> Dataset:
    """A seeded random `fraction` of `dataset` (all of it at 1.0)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"data_fraction must be in (0, 1], got {fraction}")
    if fraction == 1.0:
        return dataset
    size = len(dataset)  # type: ignore[arg-type]
    keep = max(1, round(size * fraction))
    generator = torch.Generator().manual_seed(seed)
    return Subset(dataset, torch.randperm(size, generator=generator)[:keep].tolist())
