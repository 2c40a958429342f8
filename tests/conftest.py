"""Shared fixtures: a tiny sweep that runs every stage for real in seconds."""

from __future__ import annotations

import atexit
import dataclasses
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("TVM_NUM_THREADS", "2")
#: Tables as a log gets them (`dlas.runner.console.PIPE_WIDTH`), whatever the terminal the
#: suite was started from exports: with COLUMNS=80 rich folds the plan's and the plugin
#: listing's cells, and tests that read a phrase from them failed. Tests of the width
#: itself set COLUMNS with monkeypatch.
os.environ["COLUMNS"] = "240"
#: Compile helpers (`dlas.runner.compile_ahead`) only where a test asks for them
#: (tests/test_compile_ahead.py): elsewhere every entry is computed by the test's own
#: process, as the tests of counts, claims and interrupts expect.
os.environ.setdefault("DLAS_COMPILE_AHEAD", "0")
#: The suite's timings widen nothing a user later reads: their own drift record
#: (`dlas.results.drift_record`), shared by the suite's processes, gone with the run.
if "DLAS_DRIFT_RECORD" not in os.environ:
    _drift_dir = tempfile.mkdtemp(prefix="dlas-drift-")
    os.environ["DLAS_DRIFT_RECORD"] = os.path.join(_drift_dir, "drift.sqlite")
    # the process that made it removes it (a CI host kept 89 of them)
    atexit.register(shutil.rmtree, _drift_dir, True)

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
  timing_rounds: 2
  placement_wait_s: 0
  noise_budget_s: 1
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


#: Seconds a test's timing group may wait for a quiet machine or for near placement. The
#: suite runs beside other suites on 2-core machines, where the default budgets (20 s for
#: quiet, 60 s for placement, per group) would be spent at nearly every group; the suite's
#: timings are not results, only their flags are checked. Tests of the waiting itself
#: build their own `RoundsPolicy`. (Ray tasks run in other processes: their sweeps set
#: these budgets in the config, as TINY_SWEEP does.)
TEST_NOISE_BUDGET_S = 1.0


@pytest.fixture(autouse=True)
def _short_timing_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlas.runner import timing_groups as timing

    real = timing.rounds_policy

    def capped(point: Any, passes: int | None = None) -> timing.RoundsPolicy:
        if passes is None and "timing_passes" not in point.budgets.model_fields_set:
            # a sweep run without `dlas.runner.passes` (Runner.run) is one whole pass here
            # (`_one_timing_pass`), not the first of the default three
            point = dataclasses.replace(point, budgets=point.budgets.model_copy(
                update={"timing_passes": 1}))
        policy = real(point, passes)
        return dataclasses.replace(
            policy, placement_budget_s=0.0,
            noise_budget_s=min(policy.noise_budget_s, TEST_NOISE_BUDGET_S),
            min_rounds=min(policy.min_rounds, 3))

    monkeypatch.setattr(timing, "rounds_policy", capped)


@pytest.fixture(autouse=True)
def _one_timing_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's sweeps take one timing pass unless their config or `--passes` asks for
    more: the default three (`budgets.timing_passes`) would start every sweep test's
    timing workers three times, and the suite's timings are not results. Tests of passes
    set them; the default itself is checked in test_measurement.py."""
    from dlas.runner import passes as module

    real = module.run_in_passes

    def one_pass(executor: Any, config: Any, *, passes: int | None = None,
                 **kw: Any) -> Any:
        if passes is None and "timing_passes" not in config.budgets.model_fields_set:
            passes = 1
        return real(executor, config, passes=passes, **kw)

    monkeypatch.setattr(module, "run_in_passes", one_pass)


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


TINY_IMAGENET_CLASSES = ("n01440764", "n01443537", "n01484850")
TINY_IMAGENET_PER_CLASS = 5


def write_image_folder(folder: Path, classes: tuple[str, ...], per_class: int) -> None:
    """JPEGs in ``folder/<class>/``: a grey centre with red bands at the left and right
    edges that a resize-256, center-crop-224 transform cuts away entirely (the bands are 32
    of 320 columns at 256 high, or twice that at 512 high; the crop drops 48). The grey is
    ``40 + 10 * image index within the class``, ``image index`` counting from 0."""
    from PIL import Image

    for c, wnid in enumerate(classes):
        (folder / wnid).mkdir(parents=True)
        for i in range(per_class):
            scale = 1 + (i + c) % 2  # 320x256 or 640x512: the resize must do its part
            width, height, band = 320 * scale, 256 * scale, 32 * scale
            pixels = np.full((height, width, 3), 40 + 10 * i, dtype=np.uint8)
            pixels[:, :band] = pixels[:, width - band:] = (255, 0, 0)
            name = f"ILSVRC2012_val_{c * per_class + i:08d}.JPEG"
            Image.fromarray(pixels).save(folder / wnid / name, quality=95)


@pytest.fixture
def tiny_imagenet(tmp_path: Path) -> Path:
    """An ImageNet root in the layout dlas reads (``<root>/val/<wnid>/*.JPEG``): 3 classes of
    5 generated images (see write_image_folder)."""
    root = tmp_path / "imagenet"
    write_image_folder(root / "val", TINY_IMAGENET_CLASSES, TINY_IMAGENET_PER_CLASS)
    return root
