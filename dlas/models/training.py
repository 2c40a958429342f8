"""Training and fine-tuning with PyTorch Lightning, as in the paper.

SGD (momentum 0.9, weight decay 5e-4), cross-entropy, and a one-cycle learning rate that
peaks at ``max_lr``. Momentum is held at 0.9 (``cycle_momentum=False``) because that is
what the paper states; PyTorch's one-cycle would otherwise cycle it between 0.85 and 0.95.

Runs are reproducible and resumable: every source of randomness in an epoch (shuffling,
augmentation) is reseeded from ``(seed, epoch)``, so a run interrupted after epoch k and
resumed from its checkpoint ends with the same weights as one that never stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import prune
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from dlas._compat import install_torchvision_shim
from dlas.datasets.base import DatasetBundle
from dlas.integrity import check_seal, remove_sealed, write_seal

# Lightning imports torchmetrics, which imports torchvision: the shim must come first.
install_torchvision_shim()
import pytorch_lightning as pl  # noqa: E402

MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
CHECKPOINT_NAME = "last.ckpt"
log = logging.getLogger(__name__)
_STATE_KEY = "dlas_training"


@dataclass
class TrainResult:
    """The trained model (the same object that was passed in, left in eval mode), one
    record per epoch (``epoch``, ``loss``, ``val_acc``, ``lr``, ``train_seconds``,
    ``seconds``), and the total wall time of all epochs, across resumed runs."""

    model: nn.Module
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


#: Called after every finished epoch with its history row and the epoch count.
EpochReport = Callable[[dict[str, Any], int], None]


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


class CheckpointMismatchError(ValueError):
    """The checkpoint in ``checkpoint_dir`` was written by a run with other settings."""


def seed_all(seed: int) -> None:
    """Seed torch, numpy and ``random``; call before building a model for reproducible
    initial weights."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _epoch_seed(seed: int, epoch: int) -> int:
    return (seed * 1_000_003 + epoch * 7_919 + 1) % 2**63


class _EpochSeededSampler(Sampler[int]):
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
        generator = torch.Generator().manual_seed(_epoch_seed(self.seed, self.epoch))
        yield from torch.randperm(self.size, generator=generator).tolist()

    def __len__(self) -> int:
        return self.size


def _channels_last(x: torch.Tensor, enabled: bool = True) -> torch.Tensor:
    """Image batches in channels-last layout while training: PyTorch's CPU convolutions
    (oneDNN) run 25-30% faster on it than on NCHW (ResNet18 and MobileNetV2 at width 0.5,
    batch 64, 2 threads, AMD EPYC Zen 3), and the values computed are the same function.
    Not for a model `channels_last_safe` refuses."""
    if not enabled:
        return x
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


def channels_last_safe(model: torch.nn.Module) -> bool:
    """Whether training `model` in channels-last layout is safe.

    Measured (torch 2.13 CPU, AMD EPYC Zen 4, AVX-512): oneDNN's AVX-512 1x1-convolution
    backward-weights kernel corrupts the heap for a channels-last 1x1 conv with stride 2
    whose input channels are not a multiple of 16 (8 and 12 crashed; 4, 16 and stride 1
    did not) when the batch is not a multiple of 16 (13, 29: the last batch of an epoch):
    'double free or corruption' or a segfault, ResNet18 at width 0.125 on digits among
    them. Such models train in NCHW, on every CPU alike (no CPU-dependent path)."""
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1) \
                and max(m.stride) > 1 and m.in_channels % 16:
            return False
    return True


class _Classifier(pl.LightningModule):
    def __init__(
        self,
        model: nn.Module,
        *,
        max_lr: float,
        total_steps: int,
        seed: int,
        config: dict[str, Any],
    ) -> None:
        super().__init__()
        self.model = model
        self.max_lr = max_lr
        self.total_steps = total_steps
        self.seed = seed
        self.config = config
        self.history: list[dict[str, float]] = []
        self.total_seconds = 0.0
        #: Batches in channels-last layout (`channels_last_safe`).
        self.channels_last = True
        self._loss_sum = 0.0
        self._loss_count = 0
        self._correct = 0
        self._seen = 0
        self._epoch_start = 0.0
        self._train_end = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def on_train_epoch_start(self) -> None:
        seed_all(_epoch_seed(self.seed, self.current_epoch))
        self._loss_sum, self._loss_count = 0.0, 0
        self._epoch_start = time.perf_counter()
        self._train_end = 0.0

    def training_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = _channels_last(x, self.channels_last)
        loss = F.cross_entropy(self.model(x), y)
        self._loss_sum += loss.item() * len(y)
        self._loss_count += len(y)
        self.log("loss", loss, prog_bar=True, logger=False)
        return loss

    def on_validation_epoch_start(self) -> None:
        if not self._train_end:
            self._train_end = time.perf_counter()
        self._correct, self._seen = 0, 0

    def validation_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        x = _channels_last(x, self.channels_last)
        self._correct += int((self.model(x).argmax(dim=1) == y).sum())
        self._seen += len(y)

    def on_validation_epoch_end(self) -> None:
        accuracy = self._correct / max(self._seen, 1)
        self.log("val_acc", accuracy, prog_bar=True, logger=False)

    def finish_epoch(self) -> None:
        """Called at the end of each epoch (after validation), before the checkpoint."""
        now = time.perf_counter()
        seconds = now - self._epoch_start
        self.total_seconds += seconds
        self.history.append(
            {
                "epoch": self.current_epoch + 1,
                "loss": self._loss_sum / max(self._loss_count, 1),
                "val_acc": self._correct / max(self._seen, 1),
                "lr": float(self.trainer.optimizers[0].param_groups[0]["lr"]),
                "train_seconds": (self._train_end or now) - self._epoch_start,
                "seconds": seconds,
            }
        )

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(
            self.model.parameters(),
            lr=self.max_lr,
            momentum=MOMENTUM,
            weight_decay=WEIGHT_DECAY,
        )
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer,
            max_lr=self.max_lr,
            total_steps=self.total_steps,
            cycle_momentum=False,
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[_STATE_KEY] = {
            "config": self.config,
            "history": self.history,
            "seconds": self.total_seconds,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get(_STATE_KEY, {})
        self.history = list(state.get("history", []))
        self.total_seconds = float(state.get("seconds", 0.0))


class _EpochEnd(pl.Callback):
    """Records the epoch, then (optionally) writes ``last.ckpt`` atomically, so a crash
    mid-write never leaves a truncated checkpoint behind, with its seal (size and SHA-256,
    `dlas.integrity`), so damage done to it later is found before a resume loads it; then
    reports the epoch."""

    def __init__(self, checkpoint_dir: Path | None, on_epoch: EpochReport | None) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.on_epoch = on_epoch

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, _Classifier)
        pl_module.finish_epoch()
        if self.checkpoint_dir is not None:
            final = self.checkpoint_dir / CHECKPOINT_NAME
            partial = final.with_name(final.name + ".partial")
            trainer.save_checkpoint(partial)
            # the seal first: a crash between the two renames leaves a new seal beside the
            # old checkpoint, which reads as damaged, and training starts over (never a
            # checkpoint used unchecked)
            write_seal(partial, for_name=final)
            os.replace(partial, final)
        if self.on_epoch is not None:
            self.on_epoch(pl_module.history[-1], int(trainer.max_epochs or 0))


@contextlib.contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Hide Lightning's start-up banners ("GPU available: False", ...) and the
    data-loader worker advice that does not apply to in-memory datasets."""
    names = ("pytorch_lightning", "lightning_fabric", "lightning.pytorch", "lightning.fabric")
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=r".*number of training batches.*")
            warnings.filterwarnings("ignore", message=r".*`max_epochs` was not set.*")
            warnings.filterwarnings("ignore", message=r".*LeafSpec.*")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _train_subset(dataset: Dataset, fraction: float, seed: int) -> Dataset:
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"data_fraction must be in (0, 1], got {fraction}")
    if fraction == 1.0:
        return dataset
    size = len(dataset)  # type: ignore[arg-type]
    keep = max(1, round(size * fraction))
    generator = torch.Generator().manual_seed(seed)
    return Subset(dataset, torch.randperm(size, generator=generator)[:keep].tolist())


def _load_checkpoint(path: Path) -> dict[str, Any]:
    # Our own checkpoints, in our own cache directory: full unpickling is acceptable.
    return torch.load(path, map_location="cpu", weights_only=False)


def _resumable(path: Path, what: str) -> dict[str, Any] | None:
    """The checkpoint at `path`, or None (it is deleted, and a warning says so) when it is
    damaged: its seal differs, or, for one written before seals existed, it does not
    load. A damaged checkpoint may still unpickle into wrong weights, so it is never
    resumed from; the fit starts over from epoch 1."""
    verdict = check_seal(path)
    problem = verdict.describe() if not verdict.intact else None
    checkpoint = None
    if problem is None:
        try:
            checkpoint = _load_checkpoint(path)
        except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes torch raise
            problem = f"it does not load ({type(exc).__name__}: {exc})"
    if problem is None:
        return checkpoint
    log.warning("the %s checkpoint %s is damaged (%s): deleted; %s starts over from epoch 1",
                what, path, problem, what)
    remove_sealed(path)
    return None


def _resume(checkpoint_dir: Path, kind: str, config: dict[str, Any], module: _Classifier,
            model: nn.Module, epochs: int) -> tuple[Path | None, TrainResult | None]:
    """Where a run with these settings left off in `checkpoint_dir`: (the checkpoint to
    resume from, None), or (None, the result) when it had finished, its weights restored
    without starting Lightning, or (None, None) with nothing to resume. A checkpoint of
    other settings is an error, not a silent restart."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    candidate = checkpoint_dir / CHECKPOINT_NAME
    what = "training" if kind == "train" else "fine-tuning"
    checkpoint = _resumable(candidate, what) if candidate.is_file() else None
    if checkpoint is None:
        return None, None
    state = checkpoint.get(_STATE_KEY, {})
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
    train_set = _train_subset(bundle.train, data_fraction, seed)
    size = len(train_set)  # type: ignore[arg-type]
    # A final batch of one sample breaks BatchNorm in training mode; drop only that case.
    drop_last = size > batch_size and size % batch_size == 1
    steps_per_epoch = size // batch_size if drop_last else -(-size // batch_size)
    train_loader = DataLoader(
        train_set,
        batch_size=batch_size,
        sampler=_EpochSeededSampler(size, seed),
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
    }
    module = _Classifier(
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
        stack.enter_context(_quiet_lightning())
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=epochs,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            enable_progress_bar=progress,
            num_sanity_val_steps=0,
            default_root_dir=root,
            callbacks=[*settings.callbacks, _EpochEnd(checkpoint_dir, settings.on_epoch)],
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
