"""The Lightning module dlas trains and fine-tunes with, as in the paper: SGD (momentum
0.9, weight decay 5e-4), cross-entropy, and a one-cycle learning rate that peaks at
``max_lr``. Momentum is held at 0.9 (``cycle_momentum=False``) because that is what the
paper states; PyTorch's one-cycle would otherwise cycle it between 0.85 and 0.95.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dlas._compat import install_torchvision_shim
from dlas.models.seeding import epoch_seed, seed_all

# Lightning imports torchmetrics, which imports torchvision: the shim must come first.
install_torchvision_shim()
import pytorch_lightning as pl  # noqa: E402

MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
#: Where a checkpoint keeps dlas's own state (settings, history, seconds).
STATE_KEY = "dlas_training"


def to_channels_last(x: torch.Tensor, enabled: bool = True) -> torch.Tensor:
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


class Classifier(pl.LightningModule):
    """A model with its optimiser, schedule and per-epoch history (`finish_epoch`)."""

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
        seed_all(epoch_seed(self.seed, self.current_epoch))
        self._loss_sum, self._loss_count = 0.0, 0
        self._epoch_start = time.perf_counter()
        self._train_end = 0.0

    def training_step(self, batch: Sequence[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        x = to_channels_last(x, self.channels_last)
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
        x = to_channels_last(x, self.channels_last)
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
        checkpoint[STATE_KEY] = {
            "config": self.config,
            "history": self.history,
            "seconds": self.total_seconds,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint.get(STATE_KEY, {})
        self.history = list(state.get("history", []))
        self.total_seconds = float(state.get("seconds", 0.0))


@contextlib.contextmanager
def quiet_lightning() -> Iterator[None]:
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
