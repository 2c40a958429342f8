"""Training and fine-tuning with PyTorch Lightning, as in the paper: a fit (`train_model`,
`fine_tune`) of the Lightning module (`dlas.models.classifier`), reproducible
(`dlas.models.seeding`) and resumable from its checkpoints (`dlas.models.checkpoint`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.utils import prune
from torch.utils.data import DataLoader, Dataset

from dlas.datasets.base import DatasetBundle
from dlas.models.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointMismatchError,
    EpochEnd,
    EpochReport,
    resumable,
)
from dlas.models.classifier import STATE_KEY, Classifier, channels_last_safe, pl, quiet_lightning
from dlas.models.seeding import EpochSeededSampler, train_subset
from dlas.models.train_precision import LIGHTNING_PRECISION

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """The trained model (the same object that was passed in, left in eval mode), one
    record per epoch (``epoch``, ``loss``, ``val_acc``, ``lr``, ``train_seconds``,
    ``seconds``), and the total wall time of all epochs, across resumed runs."""

    model: nn.Module
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class FitSettings:
    """How a fit runs, shared by training, fine-tuning and pruning schedules.

    ``data_fraction`` trains on a seeded random subset of the training set. With a
    ``checkpoint_dir``, ``last.ckpt`` is written there after every epoch and an existing
    one is resumed (or, if finished, just loaded); a checkpoint from different settings
    raises :class:`CheckpointMismatchError`. ``on_epoch`` reports each finished epoch.
    """

    batch_size: int = 128
    data_fraction: float = 1.0
    seed: int = 0
    checkpoint_dir: Path | None = None
    progress: bool = True
    callbacks: Sequence[pl.Callback] = ()
    on_epoch: EpochReport | None = None
    #: "float32" or "bfloat16" (autocast, float32 weights): `dlas.models.train_precision`.
    precision: str = "float32"


def _resume(checkpoint_dir: Path, kind: str, config: dict[str, Any], module: Classifier,
            model: nn.Module, epochs: int) -> tuple[Path | None, TrainResult | None]:
    """Where a run with these settings left off in `checkpoint_dir`: (the checkpoint to
    resume from, None), or (None, the result) when it had finished, its weights restored
    without starting Lightning, or (None, None) with nothing to resume. A checkpoint of
    other settings is an error, not a silent restart."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    candidate = checkpoint_dir / CHECKPOINT_NAME
    what = "training" if kind == "train" else "fine-tuning"
    checkpoint = resumable(candidate, what) if candidate.is_file() else None
    if checkpoint is None:
        return None, None
    state = checkpoint.get(STATE_KEY, {})
    if state.get("config") != config:
        raise CheckpointMismatchError(
            f"{candidate} was written by a run with settings {state.get('config')}, "
            f"not {config}; use another checkpoint_dir or delete it"
        )
    done = len(state.get("history", []))
    if done >= epochs:
        module.load_state_dict(checkpoint["state_dict"])
        module.on_load_checkpoint(checkpoint)
        model.eval()
        return None, TrainResult(model, module.history, module.total_seconds)
    log.warning("resuming %s from epoch %d of %d (%s)", what, done + 1, epochs, candidate)
    return candidate, None


def _fit(
    model: nn.Module,
    bundle: DatasetBundle,
    epochs: int,
    *,
    kind: str,
    max_lr: float,
    settings: FitSettings,
) -> TrainResult:
    batch_size, data_fraction, seed = settings.batch_size, settings.data_fraction, settings.seed
    checkpoint_dir, progress = settings.checkpoint_dir, settings.progress
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    train_set = train_subset(bundle.train, data_fraction, seed)
    size = len(train_set)  # type: ignore[arg-type]
    # A final batch of one sample breaks BatchNorm in training mode; drop only that case.
    drop_last = size > batch_size and size % batch_size == 1
    steps_per_epoch = size // batch_size if drop_last else -(-size // batch_size)
    train_loader = DataLoader(
        train_set,
        batch_size=batch_size,
        sampler=EpochSeededSampler(size, seed),
        drop_last=drop_last,
        num_workers=0,
    )
    val_loader = DataLoader(bundle.test, batch_size=max(batch_size, 256), num_workers=0)
    config = {
        "kind": kind,
        "dataset": bundle.name,
        "epochs": epochs,
        "batch_size": batch_size,
        "max_lr": max_lr,
        "data_fraction": data_fraction,
        "seed": seed,
        "train_size": size,
        **({"precision": settings.precision} if settings.precision != "float32" else {}),
    }
    module = Classifier(
        model,
        max_lr=max_lr,
        total_steps=epochs * steps_per_epoch,
        seed=seed,
        config=config,
    )

    ckpt_path: Path | None = None
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        ckpt_path, finished = _resume(checkpoint_dir, kind, config, module, model, epochs)
        if finished is not None:
            return finished

    with contextlib.ExitStack() as stack:
        root = checkpoint_dir
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dlas-train-")))
        stack.enter_context(quiet_lightning())
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            precision=LIGHTNING_PRECISION[settings.precision],
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=progress,
            num_sanity_val_steps=0,
            default_root_dir=root,
            callbacks=[*settings.callbacks, EpochEnd(checkpoint_dir, settings.on_epoch)],
        )
        model.train()
        # Weights in channels-last while training (see _channels_last); the model is handed
        # back in the default layout, which export and the compile stage expect.
        module.channels_last = channels_last_safe(model)
        if module.channels_last:
            model.to(memory_format=torch.channels_last)
        previous_sigint = signal.getsignal(signal.SIGINT)
        try:
            trainer.fit(
                module,
                train_dataloaders=train_loader,
                val_dataloaders=val_loader,
                ckpt_path=ckpt_path,
            )
        except SystemExit as err:
            # Lightning turns Ctrl-C into SIGINT-ignored + sys.exit(1); give the caller a
            # plain KeyboardInterrupt and a working Ctrl-C back instead.
            signal.signal(signal.SIGINT, previous_sigint)
            raise KeyboardInterrupt from err
        finally:
            model.to(memory_format=torch.contiguous_format)
    model.eval()
    return TrainResult(model, module.history, module.total_seconds)


def train_model(
    model: nn.Module,
    bundle: DatasetBundle,
    epochs: int,
    *,
    max_lr: float = 0.05,
    settings: FitSettings | None = None,
) -> TrainResult:
    """Train ``model`` in place on ``bundle.train``, validating on ``bundle.test`` each epoch.

    Initial weights are the caller's: call :func:`seed_all` before building the model for
    a fully reproducible run.
    """
    return _fit(model, bundle, epochs, kind="train", max_lr=max_lr,
                settings=settings or FitSettings())


def _has_pruning(module: nn.Module, name: str) -> bool:
    return any(
        isinstance(hook, prune.BasePruningMethod) and hook._tensor_name == name
        for hook in module._forward_pre_hooks.values()
    )


def _freeze_zero_weights(model: nn.Module) -> list[nn.Module]:
    """Give every conv weight that has zeros but no pruning mask a mask of its non-zeros,
    so fine-tuning cannot revive weights that were pruned and made permanent."""
    frozen = []
    for module in model.modules():
        if not isinstance(module, nn.Conv2d) or _has_pruning(module, "weight"):
            continue
        weight = module.weight.detach()
        if bool((weight == 0).any()):
            prune.custom_from_mask(module, "weight", mask=(weight != 0).to(weight.dtype))
            frozen.append(module)
    return frozen


def fine_tune(
    model: nn.Module,
    bundle: DatasetBundle,
    epochs: int,
    *,
    lr: float = 0.05,
    settings: FitSettings | None = None,
) -> TrainResult:
    """Fine-tune a pruned model with the training recipe (one cycle peaking at ``lr``).

    Pruned weights stay zero: pruning masks already on the model are kept (they are
    applied on every forward pass), and conv weights whose zeros were made permanent get
    temporary masks that are removed again at the end, leaving the model's form unchanged.
    """
    frozen = _freeze_zero_weights(model)
    try:
        return _fit(model, bundle, epochs, kind="fine_tune", max_lr=lr,
                    settings=settings or FitSettings())
    finally:
        for module in frozen:
            prune.remove(module, "weight")


@torch.no_grad()
def evaluate(model: nn.Module, dataset: Dataset, batch_size: int = 256) -> float:
    """Top-1 accuracy in [0, 1], in eval mode (the model's mode is restored after)."""
    was_training = model.training
    model.eval()
    correct = seen = 0
    try:
        for x, y in DataLoader(dataset, batch_size=batch_size, num_workers=0):
            correct += int((model(x).argmax(dim=1) == torch.as_tensor(y)).sum())
            seen += len(y)
    finally:
        model.train(was_training)
    if seen == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    return correct / seen
