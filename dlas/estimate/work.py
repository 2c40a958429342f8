"""What each stage of a point has to do, in the quantities its cost scales with.

The estimate never runs a stage; it describes each one by the few numbers its time is
roughly proportional to (model MACs and conv count, images x epochs, tuning trials, timed
runs). The built-in cost model turns them into seconds, and a measured entry of the same
kind is rescaled by the ratio of the built-in costs of the two, so measured and built-in
estimates scale the same documented way.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any

from dlas.registry import PRUNING_TAG
from dlas.sweep.grid import Point, canonical_json


def parent_of(stage: str) -> str | None:
    """The stage `stage` runs after, as the stage declares it (data is the root)."""
    from dlas.stages import BY_NAME

    return BY_NAME[stage].parent


#: (train images, test images) of the datasets dlas ships; another dataset counts as
#: CIFAR-10 (the paper's), and an ImageNet-tagged one as the ImageNet validation set.
DATASET_IMAGES: dict[str, tuple[int, int]] = {
    "digits": (1437, 360),  # scikit-learn's 1797, split 80/20 (dlas/datasets/digits.py)
    "cifar10": (50_000, 10_000),
    "imagenet": (0, 49_000),  # evaluation only; 1 image per class held out for int8
}
IMAGENET_TAG = "imagenet"
CIFAR_SHAPE, CIFAR_CLASSES = (3, 32, 32), 10
IMAGENET_SHAPE, IMAGENET_CLASSES = (3, 224, 224), 1000


def _imagenet(point: Point) -> bool:
    """Whether the point's dataset is ImageNet's (by name, or tagged as a stand-in)."""
    return point.datasets.name == "imagenet" or IMAGENET_TAG in point.datasets.tags


def dataset_input(point: Point) -> tuple[tuple[int, int, int], int]:
    """The input shape and class count a point's dataset gives, without loading it:
    ImageNet-tagged data is 3x224x224 in 1000 classes; the rest CIFAR's 3x32x32 in 10, or
    3xSxS where the option has an `image_size` S (digits)."""
    ds = point.datasets
    if _imagenet(point):
        return IMAGENET_SHAPE, IMAGENET_CLASSES
    side = getattr(ds.params, "image_size", None)
    if isinstance(side, int):
        return (3, side, side), CIFAR_CLASSES
    return CIFAR_SHAPE, CIFAR_CLASSES

try:  # the default budget of the metaschedule option when the sweep gives none
    from dlas.tuning.metaschedule.options import PAPER_TRIALS as DEFAULT_TRIALS
except ImportError:  # pragma: no cover - moved; the paper's number
    DEFAULT_TRIALS = 20_000


@dataclass(frozen=True)
class ModelSize:
    """A dense model's size: MACs of one batch-1 forward pass and its conv layers."""

    macs: int
    convs: int
    #: False when the model could not be built here; the sizes are then guesses (a CIFAR
    #: ResNet18's) and scaling by them means nothing.
    known: bool = True


#: Stands in for a model that cannot be built here (CIFAR ResNet18, width 1).
UNKNOWN_SIZE = ModelSize(macs=555_000_000, convs=21, known=False)


@dataclass(frozen=True)
class StageWork:
    """One stage entry (stage, key) and the quantities its cost scales with."""

    stage: str
    key: str
    #: layer -> option name of the point it belongs to (the first point that needs it).
    options: dict[str, str] = field(default_factory=dict, hash=False)
    macs: int = 0
    convs: int = 0
    train_images: int = 0
    test_images: int = 0
    #: train: epochs x data_fraction; compress: fine-tuning epochs x data_fraction.
    epochs: float = 0.0
    #: compress: pruning levels tried (each is evaluated); 0 for other compressions.
    levels: int = 0
    #: compile: tuning trials (the budget, capped by trials per task x tasks).
    trials: int = 0
    #: measure, baseline: forward passes (warm-up + repeat x number + verify samples).
    runs: int = 0
    csr: bool = False
    int8: bool = False
    #: compile: the algorithm's activation layout is not the paper's NCHW (NHWC, NCHWc).
    vector_layout: bool = False
    pretrained: bool = False
    #: train, compress: the precision the fit runs in (`budgets.train_precision`, resolved
    #: for this CPU): bfloat16 steps cost `machine_speed.bf16_step_speedup` times less.
    fit_precision: str = "float32"
    #: train, compress: pixels of one input image (H x W); CIFAR's 32 x 32 by default.
    input_pixels: int = 1024
    #: compile: candidates the tuner's evolutionary search scores per measured trial (the
    #: population over the trials measured per round; MetaSchedule's 512 / 64 by default).
    search_per_trial: float = 8.0
    #: compile: its kernels are an earlier compile's in the workspace (`shared_kernels`),
    #: linked, not built (`dlas.compiler.kernel_objects`).
    kernels_reused: bool = False


def dataset_images(point: Point) -> tuple[int, int]:
    ds = point.datasets
    if ds.name == "digits":
        test = round(1797 * getattr(ds.params, "test_fraction", 0.2))
        return 1797 - test, test
    if _imagenet(point):
        per_class = getattr(ds.params, "images_per_class", None)
        return 0, 1000 * per_class if per_class else DATASET_IMAGES["imagenet"][1]
    return DATASET_IMAGES.get(ds.name, DATASET_IMAGES["cifar10"])


#: Inputs of at most this many pixels (64x64) have their model's MACs counted on the CPU.
CPU_COUNT_PIXELS = 64 * 64


@functools.cache
def _model_size(name: str, version: str, params_json: str,
                shape: tuple[int, int, int], classes: int) -> ModelSize:
    """Build the model option and count its MACs and convs; UNKNOWN_SIZE when it cannot
    be built here. Small inputs (up to `CPU_COUNT_PIXELS`) are counted on the CPU, larger
    ones on the meta device when the model allows (no memory, no compute).

    Why not the meta device for all: its first forward in a process imports PyTorch's
    meta kernels and TorchDynamo, 1.3-1.4 s of a `dlas run`'s start on a Zen 4 (one core
    working, the other idle), where a CIFAR model's forward at batch 1 on the CPU takes
    0.1 s the first time and 5 ms after."""
    import torch
    from torch import nn

    from dlas import registry
    from dlas.models.macs import count_macs

    option = registry.get("models", name)
    params = option.parse_params(json.loads(params_json))
    small = shape[1] * shape[2] <= CPU_COUNT_PIXELS
    for device in (("cpu", "meta") if small else ("meta", "cpu")):
        try:
            with torch.device(device):
                model = option.fn(params, num_classes=classes, input_shape=shape)
            convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
            return ModelSize(macs=count_macs(model, shape), convs=convs)
        except Exception:  # noqa: BLE001, S112 - e.g. weights loaded onto meta; try cpu
            continue
    return UNKNOWN_SIZE


def model_size(point: Point) -> ModelSize:
    c = point.models
    shape, classes = dataset_input(point)
    return _model_size(c.name, c.option.version, canonical_json(c.identity()["params"]),
                       shape, classes)


def _compression_levels(point: Point) -> int:
    """The fine-tuning rounds of the point's compression (budgets.finetune_epochs in total,
    split over them): one per level of an option tagged `pruning` (every pruning option
    dlas ships, and a plugin's) or with a `levels` or `level` parameter; 0 otherwise."""
    c = point.compression
    params = c.params
    if (PRUNING_TAG not in c.tags and not hasattr(params, "levels")
            and not hasattr(params, "level")):
        return 0
    levels = getattr(params, "levels", None) or getattr(params, "steps", None)
    return len(levels) if isinstance(levels, list | tuple) and levels else 1


def planned_trials(point: Point, convs: int) -> int:
    """Tuning trials the point's compile stage will spend: the tuning option's `trials`,
    else budgets.tuning_trials, else the metaschedule default; capped by its trials per
    task x tasks (one task per conv, about what MetaSchedule extracts). An upper bound:
    early stopping and tasks reused from the target's tuning database spend fewer."""
    choice = point.tuning
    if point.is_baseline or choice.name == "none":
        return 0
    params = choice.params
    total = getattr(params, "trials", None) or point.budgets.tuning_trials
    if not total:
        total = DEFAULT_TRIALS if hasattr(params, "trials_per_task") else 0
    per_task = getattr(params, "trials_per_task", None)
    if isinstance(per_task, int) and per_task > 0:
        total = min(total, per_task * max(convs, 1))
    return int(total)


def stage_work(point: Point, stage: str, key: str, size: ModelSize | None = None,
               facts: dict[str, Any] | None = None) -> StageWork:
    """The work of `stage` of `point`. `size` defaults to the built model's; `facts` is a
    cached entry's meta.json, whose own record (MACs, convs, trials spent) wins over
    what the config implies."""
    from dlas.stages.train import fit_precision, is_pretrained

    facts = facts or {}
    size = size or model_size(point)
    b = point.budgets
    train_images, test_images = dataset_images(point)
    # a trained model's own count; later stages keep the dense model's (a compressed
    # model's MACs say what it computes, not what fine-tuning or compiling costs)
    macs = int(facts.get("macs") or size.macs) if stage == "train" else size.macs
    convs = int(facts.get("conv_count") or size.convs)
    epochs = 0.0
    levels = 0
    if stage == "train":
        epochs = 0.0 if is_pretrained(point) else b.epochs * b.data_fraction
    elif stage == "compress":
        levels = _compression_levels(point)
        epochs = b.finetune_epochs * b.data_fraction if levels else 0.0
    trials = 0
    search_per_trial = 8.0
    if stage == "compile":
        population = getattr(point.tuning.params, "population", None)
        per_iter = getattr(point.tuning.params, "trials_per_iter", None)
        if isinstance(population, int) and isinstance(per_iter, int) and per_iter > 0:
            search_per_trial = population / per_iter
        tuning = facts.get("tuning")
        trials = (int(tuning.get("trials") or 0) if isinstance(tuning, dict)
                  else planned_trials(point, convs))
    precision = "float32"
    if stage in ("train", "compress") and epochs > 0:
        precision = str(facts.get("fit_precision") or fit_precision(b))
    runs = 0
    if stage in ("measure", "baseline"):
        # one pass's share of the samples (the estimate counts every pass)
        runs = (b.warmup + math.ceil(b.measure_repeat / b.timing_passes) * b.measure_number
                + b.verify_samples)
    return StageWork(
        stage=stage, key=key, options={layer: c.name for layer, c in point.choices.items()},
        macs=macs, convs=convs, train_images=train_images, test_images=test_images,
        epochs=epochs, levels=levels, trials=trials, runs=runs,
        csr="csr" in point.algorithms.tags or point.algorithms.name.endswith("_csr"),
        int8=point.compression.name.startswith("int8"),
        vector_layout=getattr(point.algorithms.params, "layout", "NCHW") != "NCHW",
        pretrained=is_pretrained(point), fit_precision=precision,
        input_pixels=_pixels(point), search_per_trial=search_per_trial,
        kernels_reused=stage == "compile" and bool(facts.get("kernels_reused")))


def shared_kernels(point: Point) -> str | None:
    """What two points' compiles must share to build the same kernels
    (`dlas.compiler.kernel_objects`): a dense algorithm, untuned, on weights of the model's
    own shapes and precision (no compression, or one that zeroes weights in place: tag
    'sparse'). None where the kernels follow the weights (CSR), a search or a precision."""
    if "dense" not in point.algorithms.tags or point.tuning.name != "none":
        return None
    if point.compression.name != "none" and "sparse" not in point.compression.tags:
        return None
    return json.dumps([point.datasets.identity(), point.models.identity(),
                       point.algorithms.identity(), point.targets.identity()],
                      sort_keys=True, default=str)


def _pixels(point: Point) -> int:
    shape, _ = dataset_input(point)
    return int(shape[1] * shape[2])
