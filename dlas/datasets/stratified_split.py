"""scikit-learn's seeded stratified train/test split, without importing scikit-learn.

Why: the digits dataset's first stage imported `sklearn.datasets` and
`sklearn.model_selection` for one file and one split, and that import (with SciPy) took
1.3-2.3 s of one core on a 2-vCPU Zen 3 (2026-12-01), ahead of the quickstart's training.
The split must stay the one every earlier workspace, accuracy and cache key was made with,
so this is scikit-learn's algorithm (`StratifiedShuffleSplit._iter_indices` and
`utils.extmath._approximate_mode`, 1.9.1), step for step, drawing from the same
`numpy.random.RandomState`; tests/test_datasets.py compares the two on several seeds and
fractions, and fails if a new scikit-learn splits differently.
"""

from __future__ import annotations

import math

import numpy as np


def stratified_split(labels: np.ndarray, test_fraction: float,
                     seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (train, test) indices `train_test_split(np.arange(n), test_size=test_fraction,
    random_state=seed, stratify=labels)` returns."""
    n = len(labels)
    n_test = math.ceil(test_fraction * n)
    n_train = n - n_test
    _, y_indices, class_counts = np.unique(labels, return_inverse=True, return_counts=True)
    if class_counts.min() < 2 or n_train < len(class_counts) or n_test < len(class_counts):
        raise ValueError(f"cannot split {n} samples of {len(class_counts)} classes "
                         f"(smallest {class_counts.min()}) with test_fraction {test_fraction}")
    class_indices = np.split(np.argsort(y_indices, kind="stable"),
                             np.cumsum(class_counts)[:-1])
    rng = np.random.RandomState(seed)
    n_i = _approximate_mode(class_counts, n_train, rng)
    t_i = _approximate_mode(class_counts - n_i, n_test, rng)
    train: list[int] = []
    test: list[int] = []
    for i, count in enumerate(class_counts):
        chosen = class_indices[i].take(rng.permutation(count), mode="clip")
        train.extend(chosen[: n_i[i]])
        test.extend(chosen[n_i[i]: n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(test)


def _approximate_mode(class_counts: np.ndarray, n_draws: int,
                      rng: np.random.RandomState) -> np.ndarray:
    """How many of `n_draws` each class gets: the floor of its share, then one more for
    the classes with the largest remainders, ties drawn from `rng`."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (inds,) = np.where(remainder == value)
            add_now = min(len(inds), need_to_add)
            floored[rng.choice(inds, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)
