"""Shared fixtures: a tiny sweep that runs every stage for real in seconds."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TVM_NUM_THREADS", "2")

TINY_SWEEP = """
name: {name}
datasets: [digits]
models:
  - name: tiny_cnn
compression:
{compression}
algorithms:
{algorithms}
tuning: [none]
targets: [host]
budgets:
  epochs: 1
  finetune_epochs: 1
  data_fraction: 0.25
  batch_size: 64
  measure_repeat: 5
  verify_samples: 4
"""


def tiny_sweep(name: str = "tiny", compression: list[str] | None = None,
               algorithms: list[str] | None = None) -> str:
    def items(names: list[str]) -> str:
        return "\n".join(f"  - {n}" for n in names)

    return TINY_SWEEP.format(name=name, compression=items(compression or ["none"]),
                             algorithms=items(algorithms or ["direct"]))


@pytest.fixture(scope="session", autouse=True)
def tiny_model() -> Iterator[None]:
    """A three-conv CNN (stride 2, depthwise, 1x1, residual) registered as a model option."""
    from tests.plugins import tiny_cnn  # noqa: F401  (registers `tiny_cnn`)

    yield


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact cache for the session: tests that only need results reuse builds."""
    return tmp_path_factory.mktemp("shared-cache")


def _write_cifar_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    entry = {
        "batch_label": path.name,
        "labels": labels,
        "data": images.reshape(len(labels), 3 * 32 * 32),
        "filenames": [f"img{i}.png" for i in range(len(labels))],
    }
    with open(path, "wb") as f:
        pickle.dump(entry, f)


@pytest.fixture
def tiny_cifar(tmp_path: Path) -> Path:
    """A CIFAR-10 root in the real on-disk format (pickled dicts), 4 images per training
    batch; the files are not the official release, so load it with verify_md5=False."""
    from dlas.datasets.cifar10 import BASE_FOLDER

    folder = tmp_path / BASE_FOLDER
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(1, 6):
        images = rng.integers(0, 256, size=(4, 3, 32, 32), dtype=np.uint8)
        _write_cifar_batch(folder / f"data_batch_{i}", images, [(i + k) % 10 for k in range(4)])
    test_images = rng.integers(0, 256, size=(6, 3, 32, 32), dtype=np.uint8)
    _write_cifar_batch(folder / "test_batch", test_images, list(range(6)))
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"], "num_cases_per_batch": 4}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f)
    return tmp_path
