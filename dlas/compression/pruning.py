"""Global L1 unstructured "weight pruning" of convolution weights, as in the paper, and the
iterative prune / fine-tune schedule that weight and channel pruning share.

All Conv2d weights compete in one ranking by magnitude, so layers lose different shares
of their weights; Linear layers, biases and BatchNorm are never pruned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.utils import prune

from dlas.datasets.base import DatasetBundle

if TYPE_CHECKING:
    from dlas.models.training import FitSettings


#: Which convs a pruning option prunes: every one (the paper's), or only the pointwise
#: ones (1x1, ungrouped: Elsen et al.'s sparse MobileNets keep depthwise and 3x3 convs
#: dense, where nine weights a channel leave nothing to prune and no work to save).
CONV_SELECTIONS = ("all", "pointwise")


def _conv_modules(model: nn.Module, convs: str = "all") -> list[nn.Conv2d]:
    if convs not in CONV_SELECTIONS:
        raise ValueError(f"convs must be one of {CONV_SELECTIONS}, got {convs!r}")
    found = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if convs == "pointwise":
        found = [m for m in found if tuple(m.kernel_size) == (1, 1) and m.groups == 1]
    return found


def _mask_of(module: nn.Module) -> torch.Tensor | None:
    mask = getattr(module, "weight_mask", None)
    return mask if isinstance(mask, torch.Tensor) else None


def conv_sparsity(model: nn.Module) -> float:
    """Fraction of Conv2d weights that are zero (masked or stored as zero)."""
    zeros = total = 0
    for module in _conv_modules(model):
        weight = module.weight.detach()
        zeros += int((weight == 0).sum())
        total += weight.numel()
    if total == 0:
        raise ValueError("model has no Conv2d layers")
    return zeros / total


def prune_weights_global_l1(model: nn.Module, sparsity: float, convs: str = "all"
                            ) -> nn.Module:
    """Mask the smallest-magnitude conv weights, ranked across all layers, until exactly
    ``round(sparsity * n)`` of the ``n`` conv weights are zero.

    Works in place and returns ``model``. Calling it again with a higher sparsity prunes
    further (existing masks are kept; the ranking is over the surviving weights), which is
    how the iterative schedule works. Masks stay attached (``weight_orig`` and
    ``weight_mask``) so fine-tuning keeps pruned weights at zero; call
    :func:`make_permanent` to bake them in. `convs` (one of `CONV_SELECTIONS`) says which
    convs take part; the others keep every weight.
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    selected = _conv_modules(model, convs)
    if not selected:
        raise ValueError(f"model has no Conv2d layers to prune ({convs})")
    total = sum(m.weight.numel() for m in selected)
    target = round(sparsity * total)
    masked = sum(int((mask == 0).sum()) for m in selected
                 if (mask := _mask_of(m)) is not None)
    if masked > target:
        raise ValueError(
            f"model already has {masked / total:.4f} of conv weights masked, "
            f"more than the requested {sparsity}"
        )
    # An integer amount is an exact count, taken from the weights still unmasked; weights
    # that are already exactly zero rank first, so they are absorbed without overshoot.
    prune.global_unstructured(
        [(m, "weight") for m in selected],
        pruning_method=prune.L1Unstructured,
        amount=target - masked,
    )
    zeros = sum(int((m.weight == 0).sum()) for m in selected)
    if zeros != target:
        raise RuntimeError(
            f"pruning left {zeros} zero conv weights instead of {target}: the model had more "
            "exact zeros than the target sparsity allows"
        )
    return model


def prune_weights_per_layer_l1(model: nn.Module, sparsity: float, convs: str = "all"
                               ) -> nn.Module:
    """Mask the smallest-magnitude weights of each conv, ranked within that conv, until
    ``round(sparsity * n)`` of its ``n`` weights are zero: every layer equally sparse (the
    setting of Elsen et al.'s sparse kernels), where the global ranking leaves early
    layers far denser than late ones. Works in place, keeps existing masks (a higher
    level prunes further), as `prune_weights_global_l1`; `convs` as there."""
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity must be in [0, 1), got {sparsity}")
    selected = _conv_modules(model, convs)
    if not selected:
        raise ValueError(f"model has no Conv2d layers to prune ({convs})")
    for conv in selected:
        target = round(sparsity * conv.weight.numel())
        mask = _mask_of(conv)
        masked = int((mask == 0).sum()) if mask is not None else 0
        if masked > target:
            raise ValueError(f"a conv already has {masked} of its {conv.weight.numel()} "
                             f"weights masked, more than the requested {sparsity}")
        prune.l1_unstructured(conv, "weight", amount=target - masked)
    return model


def make_permanent(model: nn.Module) -> nn.Module:
    """Remove pruning reparametrizations so the state_dict holds plain weight tensors
    (with their zeros), as the exporters and compilers downstream expect."""
    for module in model.modules():
        for hook in list(module._forward_pre_hooks.values()):
            if isinstance(hook, prune.BasePruningMethod):
                prune.remove(module, hook._tensor_name)
    return model


def is_pruned(model: nn.Module) -> bool:
    """Whether any module still carries a pruning mask."""
    return any(
        isinstance(hook, prune.BasePruningMethod)
        for module in model.modules()
        for hook in module._forward_pre_hooks.values()
    )


def _split_epochs(total: int, parts: int, used: int | None = None) -> list[int]:
    """Split ``total`` epochs over ``parts`` levels as evenly as possible.

    The remainder goes first to the level ``used`` (the one whose model the point keeps,
    when it is known before the schedule runs: a fixed level), then to the levels before
    it, nearest first (the ones its model went through), then to the later ones; without
    ``used``, to the earlier levels. So with fewer epochs than levels the level used is
    never left without fine-tuning: 2 epochs over 7 levels with level 3 used is
    [0, 1, 1, 0, 0, 0, 0], not [1, 1, 0, ...].
    """
    if parts < 1:
        raise ValueError(f"cannot split epochs over {parts} levels")
    base, extra = divmod(total, parts)
    order = list(range(parts))
    if used is not None:
        if not 0 <= used < parts:
            raise ValueError(f"level index {used} is not among {parts} levels")
        order = [used, *range(used - 1, -1, -1), *range(used + 1, parts)]
    split = [base] * parts
    for index in order[:extra]:
        split[index] += 1
    return split


#: ``prune_step(model, level)`` prunes ``model`` in place to ``level`` (masks, kept across
#: calls so each step prunes further).
PruneStep = Callable[[nn.Module, float], object]
#: ``choose(records)`` returns the index of the level to keep among the records so far, or
#: None while it cannot tell yet. It must be consistent across prefixes: once the full
#: schedule's choice is among the records, it must be returned (see ``elbow.select_level``).
Chooser = Callable[[list[dict[str, Any]]], int | None]


def _last(records: list[dict[str, Any]]) -> int:
    return len(records) - 1


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def iterative_pruning(
    model: nn.Module,
    bundle: DatasetBundle,
    levels: Sequence[float],
    finetune_epochs: int,
    prune_step: PruneStep,
    *,
    lr: float = 0.05,
    settings: FitSettings | None = None,
    choose: Chooser | None = None,
    permanent: bool = True,
    used: int | None = None,
) -> tuple[nn.Module, list[dict[str, Any]], int]:
    """The paper's schedule: prune to each level in turn, fine-tuning after each step, and
    return the model at the level ``choose`` picks (default: the last).

    ``finetune_epochs`` is the total, split evenly over the levels (the paper: 210 for
    CIFAR-10); ``used`` is the index of the level whose model will be kept when the caller
    knows it in advance (a fixed level), which then gets the remainder first
    (``_split_epochs``). Records hold the level, the measured conv sparsity, the test accuracy after
    that level's fine-tuning and its epochs. Only the state of the level currently chosen
    is kept in memory (a copy of its state_dict), so a long schedule does not hold every
    level. With a ``settings.checkpoint_dir`` each level fine-tunes into its own subfolder,
    so an interrupted schedule resumes: pruning is deterministic, and finished levels just
    reload their result. The model is pruned in place; with ``permanent`` the masks are
    removed at the end (the zeros stay).
    """
    from dlas.models.training import FitSettings, evaluate, fine_tune

    settings = settings or FitSettings()
    choose = choose or _last
    ordered = [float(level) for level in levels]
    if not ordered:
        raise ValueError("levels must not be empty")
    if any(b <= a for a, b in zip(ordered, ordered[1:], strict=False)):
        raise ValueError(f"levels must increase strictly, got {ordered}")
    records: list[dict[str, Any]] = []
    kept: tuple[int, dict[str, torch.Tensor]] | None = None
    last = len(ordered) - 1
    for index, (level, epochs) in enumerate(
        zip(ordered, _split_epochs(finetune_epochs, len(ordered), used), strict=True)
    ):
        prune_step(model, level)
        if epochs > 0:
            level_dir = None
            if settings.checkpoint_dir is not None:
                level_dir = Path(settings.checkpoint_dir) / f"level{index:02d}_{level:g}"
            level_settings = replace(settings, seed=settings.seed + index,
                                     checkpoint_dir=level_dir)
            fine_tune(model, bundle, epochs, lr=lr, settings=level_settings)
        records.append(
            {
                "level": level,
                "sparsity": conv_sparsity(model),
                "accuracy": evaluate(model, bundle.test),
                "finetune_epochs": epochs,
            }
        )
        if index < last and choose(records) == index:
            kept = (index, _snapshot(model))
    chosen = choose(records)
    if chosen is None or not 0 <= chosen <= last:
        raise RuntimeError(f"no pruning level was chosen among {ordered} (got {chosen})")
    if chosen != last:
        if kept is None or kept[0] != chosen:
            raise RuntimeError(
                f"level {ordered[chosen]} was chosen after the schedule, but was not the "
                "choice when it was reached, so its weights were not kept")
        model.load_state_dict(kept[1])
    if permanent:
        make_permanent(model)
    model.eval()
    return model, records, chosen
