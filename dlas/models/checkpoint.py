"""Checkpoints of a fit: written atomically with a seal after every epoch (`EpochEnd`),
checked before a resume loads them (`resumable`), and refused when written by a run with
other settings (`CheckpointMismatchError`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dlas.integrity import check_seal, remove_sealed, write_seal
from dlas.models.classifier import Classifier, pl

CHECKPOINT_NAME = "last.ckpt"
log = logging.getLogger(__name__)

#: Called after every finished epoch with its history row and the epoch count.
EpochReport = Callable[[dict[str, Any], int], None]


class CheckpointMismatchError(ValueError):
    """The checkpoint in ``checkpoint_dir`` was written by a run with other settings."""


def load_checkpoint(path: Path) -> dict[str, Any]:
    # Our own checkpoints, in our own cache directory: full unpickling is acceptable.
    return torch.load(path, map_location="cpu", weights_only=False)


def resumable(path: Path, what: str) -> dict[str, Any] | None:
    """The checkpoint at `path`, or None (it is deleted, and a warning says so) when it is
    damaged: its seal differs, or, for one written before seals existed, it does not
    load. A damaged checkpoint may still unpickle into wrong weights, so it is never
    resumed from; the fit starts over from epoch 1."""
    verdict = check_seal(path)
    problem = verdict.describe() if not verdict.intact else None
    checkpoint = None
    if problem is None:
        try:
            checkpoint = load_checkpoint(path)
        except Exception as exc:  # noqa: BLE001 - whatever a damaged file makes torch raise
            problem = f"it does not load ({type(exc).__name__}: {exc})"
    if problem is None:
        return checkpoint
    log.warning("the %s checkpoint %s is damaged (%s): deleted; %s starts over from epoch 1",
                what, path, problem, what)
    remove_sealed(path)
    return None


class EpochEnd(pl.Callback):
    """Records the epoch, then (optionally) writes ``last.ckpt`` atomically, so a crash
    mid-write never leaves a truncated checkpoint behind, with its seal (size and SHA-256,
    `dlas.integrity`), so damage done to it later is found before a resume loads it; then
    reports the epoch."""

    def __init__(self, checkpoint_dir: Path | None, on_epoch: EpochReport | None) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.on_epoch = on_epoch

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        assert isinstance(pl_module, Classifier)
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
