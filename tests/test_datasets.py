"""Datasets: the offline digits set and CIFAR-10 loading from torchvision's file format."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from dlas.datasets.base import DatasetBundle, DatasetNotFoundError, fixed_batch
from dlas.datasets.cifar10 import BASE_FOLDER, MEAN, STD, load_cifar10
from dlas.datasets.digits import load_digits


@pytest.fixture(scope="module")
def digits() -> DatasetBundle:
    return load_digits()


def test_digits_shapes_and_classes(digits: DatasetBundle) -> None:
    assert digits.name == "digits"
    assert (len(digits.train), len(digits.test)) == (1437, 360)
    assert digits.num_classes == 10
    assert digits.input_shape == (3, 32, 32)
    x, y = digits.train[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    assert 0 <= int(y) < 10
    # Grey replicated to three channels.
    assert torch.equal(x[0], x[1]) and torch.equal(x[1], x[2])
    # Normalized with training statistics.
    train_x = digits.train.tensors[0]
    assert abs(float(train_x.mean())) < 1e-4
    assert abs(float(train_x.std()) - 1.0) < 1e-3


def test_digits_split_is_stratified(digits: DatasetBundle) -> None:
    test_counts = torch.bincount(digits.test.tensors[1], minlength=10)
    train_counts = torch.bincount(digits.train.tensors[1], minlength=10)
    assert int(test_counts.min()) >= 35 and int(test_counts.max()) <= 37
    assert int(train_counts.min()) > 0


def test_digits_is_deterministic(digits: DatasetBundle) -> None:
    again = load_digits()
    for a, b in zip(digits.train.tensors + digits.test.tensors,
                    again.train.tensors + again.test.tensors, strict=True):
        assert torch.equal(a, b)
    other = load_digits(seed=1)
    assert not torch.equal(other.test.tensors[1], digits.test.tensors[1])


def test_digits_calibration_and_fixed_batch(digits: DatasetBundle) -> None:
    assert digits.calibration is not None and len(digits.calibration) == 128
    batch = fixed_batch(digits.test, 8, seed=3)
    assert batch.shape == (8, 3, 32, 32)
    assert torch.equal(batch, fixed_batch(digits.test, 8, seed=3))
    assert not torch.equal(batch, fixed_batch(digits.test, 8, seed=4))
    first = fixed_batch(digits.test, 2, seed=None)
    assert torch.equal(first[1], digits.test[1][0])
    with pytest.raises(ValueError):
        fixed_batch(digits.test, 0)


# --- CIFAR-10 -----------------------------------------------------------------------

def test_cifar10_loads_torchvision_format(tiny_cifar: Path) -> None:
    # The files are not the official release, so their md5s differ: skip the check.
    bundle = load_cifar10(tiny_cifar, verify_md5=False, calibration_size=5)
    assert (len(bundle.train), len(bundle.test)) == (20, 6)
    assert bundle.num_classes == 10 and bundle.input_shape == (3, 32, 32)
    x, y = bundle.test[2]
    assert x.shape == (3, 32, 32) and y == 2
    with open(tiny_cifar / BASE_FOLDER / "test_batch", "rb") as f:
        raw = pickle.load(f)["data"][2].reshape(3, 32, 32)
    expected = (torch.as_tensor(raw, dtype=torch.float32) / 255.0
                - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    assert torch.allclose(x, expected, atol=1e-5)
    assert bundle.calibration is not None and len(bundle.calibration) == 5
    # Calibration and test views are deterministic; training is augmented.
    assert torch.equal(bundle.calibration[0][0], bundle.calibration[0][0])
    torch.manual_seed(0)
    views = [bundle.train[0][0] for _ in range(8)]
    assert any(not torch.equal(views[0], v) for v in views[1:])


def test_cifar10_accepts_the_batches_folder_itself(tiny_cifar: Path) -> None:
    bundle = load_cifar10(tiny_cifar / BASE_FOLDER, verify_md5=False)
    assert len(bundle.test) == 6


def test_cifar10_md5_mismatch_is_explained(tiny_cifar: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="verify_md5=False"):
        load_cifar10(tiny_cifar)


def test_cifar10_missing_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_cifar10(tmp_path / "nowhere")
    message = str(info.value)
    assert str(tmp_path / "nowhere" / BASE_FOLDER) in message
    assert "download" in message and "data_batch_1" in message
    assert isinstance(info.value, FileNotFoundError)


def test_cifar10_partial_folder_lists_missing_files(tiny_cifar: Path) -> None:
    (tiny_cifar / BASE_FOLDER / "test_batch").unlink()
    with pytest.raises(DatasetNotFoundError, match="test_batch"):
        load_cifar10(tiny_cifar, verify_md5=False)
