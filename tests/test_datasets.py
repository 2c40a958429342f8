"""Datasets: the offline digits set, CIFAR-10 in torchvision's file format and the ImageNet
validation set as an ImageFolder, all on data the tests write."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from dlas import registry
from dlas._compat import import_torchvision
from dlas.datasets import imagenet as imagenet_module
from dlas.datasets.base import (
    DatasetBundle,
    DatasetNotFoundError,
    EvaluationOnlyError,
    fixed_batch,
)
from dlas.datasets.cifar10 import BASE_FOLDER, MEAN, STD, load_cifar10
from dlas.datasets.digits import load_digits
from dlas.datasets.imagenet import load_imagenet
from tests.conftest import TINY_IMAGENET_CLASSES, TINY_IMAGENET_PER_CLASS


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


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
@pytest.mark.parametrize("test_fraction", [0.2, 0.1, 0.33])
def test_digits_read_and_split_exactly_as_scikit_learn_does(seed: int,
                                                            test_fraction: float) -> None:
    """dlas reads the file and splits without importing scikit-learn (1.3-2.3 s on a Zen 3);
    the data and the split must stay scikit-learn's, which every earlier workspace used."""
    import numpy as np
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    from dlas.datasets.digits import digits_pixels_and_labels
    from dlas.datasets.stratified_split import stratified_split

    pixels, labels = digits_pixels_and_labels()
    raw = sklearn_digits()
    assert np.array_equal(pixels, raw.data) and np.array_equal(labels, raw.target)
    assert labels.dtype == np.int64
    want = train_test_split(np.arange(len(labels)), test_size=test_fraction,
                            random_state=seed, stratify=labels)
    got = stratified_split(labels, test_fraction, seed)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)
    # a class set whose shares tie, so the remainders are drawn from the generator
    tied = np.repeat(np.arange(7), [5, 5, 5, 4, 4, 3, 3])
    want = train_test_split(np.arange(len(tied)), test_size=0.3, random_state=seed,
                            stratify=tied)
    for a, b in zip(stratified_split(tied, 0.3, seed), want, strict=True):
        assert np.array_equal(a, b)


def test_a_split_that_cannot_be_stratified_and_a_missing_scikit_learn_say_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import numpy as np

    from dlas.datasets import digits as digits_module
    from dlas.datasets.stratified_split import stratified_split

    with pytest.raises(ValueError, match=r"cannot split 5 samples of 2 classes \(smallest 1\)"):
        stratified_split(np.array([0, 0, 0, 0, 1]), 0.4, 0)
    with pytest.raises(ValueError, match="with test_fraction 0.05"):
        stratified_split(np.repeat(np.arange(3), 4), 0.05, 0)  # 1 test sample, 3 classes
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sklearn" else real(name, *a))
    with pytest.raises(FileNotFoundError, match="pip install scikit-learn"):
        digits_module.digits_pixels_and_labels()


def test_digits_loading_does_not_import_scikit_learn() -> None:
    import subprocess
    import sys

    code = ("import sys; from dlas.datasets.digits import load_digits; "
            "load_digits(image_size=16); print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('sklearn', 'scipy')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"


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


def test_cifar10_download_is_a_no_op_when_the_files_are_there(
    tiny_cifar: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tv = import_torchvision()

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("download attempted although the files are present")

    monkeypatch.setattr(tv.datasets.cifar, "download_and_extract_archive", no_network)
    bundle = load_cifar10(tiny_cifar, download=True, verify_md5=False)
    assert len(bundle.test) == 6


def test_cifar10_failed_download_says_where_to_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from urllib.error import URLError

    tv = import_torchvision()

    def offline(*args: object, **kwargs: object) -> None:
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(tv.datasets.cifar, "download_and_extract_archive", offline)
    with pytest.raises(DatasetNotFoundError) as info:
        registry.create("datasets", "cifar10", {"root": str(tmp_path), "download": True})
    message = str(info.value)
    assert "name resolution" in message
    assert str(tmp_path / BASE_FOLDER) in message and "copy" in message


# --- ImageNet -----------------------------------------------------------------------

GREY_AT = {i: 40 + 10 * i for i in range(TINY_IMAGENET_PER_CLASS)}  # see write_image_folder


def _grey_of(path: str) -> int:
    index = int(Path(path).stem.rsplit("_", 1)[1]) % TINY_IMAGENET_PER_CLASS
    return GREY_AT[index]


def test_imagenet_eval_transform_resizes_crops_and_normalizes(tiny_imagenet: Path) -> None:
    bundle = load_imagenet(tiny_imagenet, heldout_per_class=1)
    assert bundle.name == "imagenet" and bundle.input_shape == (3, 224, 224)
    assert bundle.num_classes == 3
    assert len(bundle.test) == 3 * (TINY_IMAGENET_PER_CLASS - 1)
    mean = torch.tensor(imagenet_module.MEAN)[:, None, None]
    std = torch.tensor(imagenet_module.STD)[:, None, None]
    for index in range(len(bundle.test)):
        x, y = bundle.test[index]
        path = bundle.test.paths[index]
        assert x.shape == (3, 224, 224) and x.dtype == torch.float32
        assert y == TINY_IMAGENET_CLASSES.index(Path(path).parent.name)
        # Uniform grey: the red edge bands were cropped away, not squeezed in, at both sizes.
        pixels = x * std + mean
        assert torch.allclose(pixels, torch.full_like(pixels, _grey_of(path) / 255), atol=0.02)


def test_imagenet_subset_is_fixed_per_seed_and_disjoint(tiny_imagenet: Path) -> None:
    a = load_imagenet(tiny_imagenet, images_per_class=2, heldout_per_class=1, seed=0)
    again = load_imagenet(tiny_imagenet, images_per_class=2, heldout_per_class=1, seed=0)
    other = load_imagenet(tiny_imagenet, images_per_class=2, heldout_per_class=1, seed=1)
    assert a.test.paths == again.test.paths
    assert a.calibration is not None and a.calibration.paths == again.calibration.paths
    assert a.test.paths != other.test.paths
    assert len(a.test) == 6 and len(a.calibration) == 3
    assert not set(a.test.paths) & set(a.calibration.paths)
    for paths, per_class in ((a.test.paths, 2), (a.calibration.paths, 1)):
        classes = [Path(p).parent.name for p in paths]
        assert sorted(classes) == sorted(TINY_IMAGENET_CLASSES * per_class)
    # The full test set is everything not held out.
    full = load_imagenet(tiny_imagenet, heldout_per_class=1, seed=0)
    assert full.calibration is not None and full.calibration.paths == a.calibration.paths
    assert set(a.test.paths) < set(full.test.paths)
    assert len(full.test) + len(full.calibration) == 3 * TINY_IMAGENET_PER_CLASS
    none_held = load_imagenet(tiny_imagenet, heldout_per_class=0)
    assert none_held.calibration is None and len(none_held.test) == 15


def test_imagenet_is_evaluation_only_unless_allowed(tiny_imagenet: Path) -> None:
    bundle = load_imagenet(tiny_imagenet, images_per_class=1)
    with pytest.raises(EvaluationOnlyError, match="allow_finetune"):
        len(bundle.train)
    with pytest.raises(EvaluationOnlyError, match="evaluation-only"):
        bundle.train[0]
    tuned = load_imagenet(tiny_imagenet, images_per_class=1, heldout_per_class=2,
                          allow_finetune=True)
    assert tuned.calibration is not None
    assert tuned.train.paths == tuned.calibration.paths and len(tuned.train) == 6
    torch.manual_seed(0)
    x, _ = tuned.train[0]
    assert x.shape == (3, 224, 224)
    with pytest.raises(ValueError, match="heldout_per_class"):
        load_imagenet(tiny_imagenet, heldout_per_class=0, allow_finetune=True)


def test_imagenet_asks_for_more_images_than_a_class_has(tiny_imagenet: Path) -> None:
    with pytest.raises(ValueError, match="has 5 images"):
        load_imagenet(tiny_imagenet, images_per_class=5, heldout_per_class=1)


def test_imagenet_root_may_be_the_val_folder(tiny_imagenet: Path) -> None:
    bundle = registry.create("datasets", "imagenet",
                             {"root": str(tiny_imagenet / "val"), "images_per_class": 1})
    assert bundle.num_classes == 3 and len(bundle.test) == 3


def test_imagenet_missing_root_names_path_and_layout(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        registry.create("datasets", "imagenet", {"root": str(tmp_path / "nowhere")})
    message = str(info.value)
    assert str(tmp_path / "nowhere" / "val") in message
    assert "<root>/val/<wnid>/" in message and "`root`" in message


def test_imagenet_unsorted_val_folder_is_explained(tmp_path: Path) -> None:
    val = tmp_path / "val"
    val.mkdir()
    (val / "ILSVRC2012_val_00000001.JPEG").write_bytes(b"not sorted yet")
    with pytest.raises(DatasetNotFoundError, match="not sorted into class folders"):
        load_imagenet(tmp_path)


def test_digits_option_upsamples_to_its_image_size() -> None:
    """`image_size` reaches the bundle (what the models are built for) and the images; the
    option refuses sizes outside 8-32 at config load."""
    from pydantic import ValidationError

    from dlas import registry

    option = registry.get("datasets", "digits")
    bundle = option.fn(option.parse_params({"image_size": 16}))
    assert bundle.input_shape == (3, 16, 16)
    assert bundle.train[0][0].shape == (3, 16, 16)
    with pytest.raises(ValidationError):
        option.parse_params({"image_size": 4})


def test_a_sweep_on_smaller_digits_compiles_and_verifies_against_pytorch(
        tmp_path: Path) -> None:
    """`image_size` through a whole sweep: the model is trained on 16x16 images, compiled by
    TVM for that input, and its output checked against PyTorch's, with a quarter of the
    32x32 model's MACs (its convs' quarter; the classifier stays)."""
    from dlas.results.store import ResultStore
    from dlas.runner.machine import MachineLock
    from dlas.runner.runner import Runner, Workspace
    from dlas.sweep.config import parse_config
    from tests.conftest import tiny_sweep

    macs = {}
    for side in (16, 32):
        text = tiny_sweep(f"side{side}").replace(
            "datasets: [digits]", f"datasets: [{{name: digits, params: {{image_size: {side}}}}}]")
        ws = tmp_path / str(side)
        runner = Runner(Workspace(ws, ws / "cache"), progress=False,
                        machine_lock=MachineLock(tmp_path / "locks"))
        assert runner.run(parse_config(text)).ok == 1
        with ResultStore(ws / "results.db") as store:
            (row,) = store.rows()
        assert row.status == "ok" and row.verified == 1 and row.max_abs_diff is not None
        assert row.verification_reference == "pytorch"
        macs[side] = row.macs
    assert 3.9 * macs[16] < macs[32] < 4 * macs[16]
