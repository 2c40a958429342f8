"""Global L1 structured "channel pruning" of convolutions, as in the paper.

Every output channel (filter) of every Conv2d competes in one ranking by the L1 norm of its
weights; the smallest are masked to zero until exactly ``round(level * filters)`` of the
model's filters are zero. The model keeps its shape, so its zeros are what CSR-sparse
algorithms exploit; :mod:`dlas.compression.physical` removes them instead.

A pruned channel is made to carry nothing: besides the filter, its conv bias and the
scale and shift of the BatchNorm that directly follows the conv are masked too. Otherwise
the BatchNorm would turn the zero filter into a constant channel (its shift), which is not
what removing a channel means, and which a physically smaller model could not reproduce.
"""

from __future__ import annotations

import torch
from torch import fx, nn
from torch.nn.utils import prune


def _convs(model: nn.Module) -> list[nn.Conv2d]:
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        raise ValueError("model has no Conv2d layers to prune")
    return convs


def batchnorm_after_conv(model: nn.Module) -> dict[nn.Conv2d, nn.BatchNorm2d]:
    """The BatchNorm2d applied directly to each conv's output (found by tracing the model
    with torch.fx), for convs that have one."""
    try:
        graph = fx.symbolic_trace(model).graph
    except Exception as err:  # fx raises many types for untraceable Python
        raise ValueError(
            f"channel pruning traces the model with torch.fx to find the BatchNorm after "
            f"each conv, and {type(model).__name__} cannot be traced: {err}") from err
    modules = dict(model.named_modules())
    pairs: dict[nn.Conv2d, nn.BatchNorm2d] = {}
    for node in graph.nodes:
        if node.op != "call_module" or not isinstance(modules[node.target], nn.BatchNorm2d):
            continue
        source = node.args[0] if node.args else None
        if isinstance(source, fx.Node) and source.op == "call_module":
            conv = modules[source.target]
            if isinstance(conv, nn.Conv2d):
                pairs[conv] = modules[node.target]  # type: ignore[assignment]
    return pairs


def _effective(module: nn.Module, name: str) -> torch.Tensor:
    """A parameter as the forward pass sees it (``orig * mask`` while masked)."""
    mask = getattr(module, f"{name}_mask", None)
    if isinstance(mask, torch.Tensor):
        return (getattr(module, f"{name}_orig") * mask).detach()
    return getattr(module, name).detach()


def _kept_filters(conv: nn.Conv2d) -> torch.Tensor:
    """Bool per filter: not masked (unmasked convs keep every filter)."""
    mask = getattr(conv, "weight_mask", None)
    if not isinstance(mask, torch.Tensor):
        return torch.ones(conv.out_channels, dtype=torch.bool)
    return mask.flatten(1).any(dim=1)


def _set_mask(module: nn.Module, name: str, mask: torch.Tensor) -> None:
    """Mask ``module.<name>`` with ``mask``, replacing the mask it already has (the new
    mask only ever adds zeros) so the state_dict keeps one ``_orig``/``_mask`` pair."""
    existing = getattr(module, f"{name}_mask", None)
    if isinstance(existing, torch.Tensor):
        existing.copy_(mask.to(existing.dtype))
        setattr(module, name, _effective(module, name))
    else:
        prune.custom_from_mask(module, name, mask=mask)


def zero_filter_count(model: nn.Module) -> tuple[int, int]:
    """(filters whose weights are all zero, all filters), over every Conv2d."""
    zeros = total = 0
    for conv in _convs(model):
        weight = _effective(conv, "weight").flatten(1)
        zeros += int((weight == 0).all(dim=1).sum())
        total += conv.out_channels
    return zeros, total


def prune_channels_global_l1(model: nn.Module, level: float,
                             batchnorms: dict[nn.Conv2d, nn.BatchNorm2d] | None = None
                             ) -> nn.Module:
    """Mask the conv filters with the smallest L1 norms per weight, ranked across all
    layers, until exactly ``round(level * n)`` of the model's ``n`` filters are masked;
    each layer's last filter is taken only when nothing else is left.

    Works in place and returns ``model``. Calling it again with a higher level prunes
    further: masked filters stay masked and the ranking is over the surviving ones (ties
    go to the earlier filter). ``batchnorms`` (default: :func:`batchnorm_after_conv`)
    says which BatchNorm's scale and shift to mask with each conv's filters.
    """
    if not 0.0 <= level < 1.0:
        raise ValueError(f"channel pruning level must be in [0, 1), got {level}")
    convs = _convs(model)
    if batchnorms is None:
        batchnorms = batchnorm_after_conv(model)
    kept = [_kept_filters(conv) for conv in convs]
    total = sum(conv.out_channels for conv in convs)
    target = round(level * total)
    masked = total - sum(int(k.sum()) for k in kept)
    if masked > target:
        raise ValueError(f"model already has {masked} of {total} conv filters masked, more "
                         f"than level {level} allows ({target})")
    # L1 per weight: a stem filter (27 weights) and a deep one (4608) compare on one scale;
    # raw sums ranked every small filter first and emptied whole layers at 5%.
    norms = torch.cat([_effective(c, "weight").flatten(1).abs().mean(dim=1) for c in convs])
    alive = torch.cat(kept)
    # Each layer's strongest surviving filter goes last, so no layer is emptied while any
    # other filter is left to prune (an emptied layer cuts the network in two).
    rank = norms.clone()
    start = 0
    for conv, keep in zip(convs, kept, strict=True):
        if keep.any():
            strongest = start + int(torch.argmax(torch.where(keep, norms[start:start + len(keep)],
                                                             torch.tensor(-1.0))))
            rank[strongest] = float("inf")
        start += conv.out_channels
    candidates = torch.nonzero(alive).flatten()
    order = torch.argsort(rank[candidates], stable=True)
    chosen = candidates[order[: target - masked]]
    alive[chosen] = False
    start = 0
    for conv in convs:
        keep = alive[start:start + conv.out_channels]
        start += conv.out_channels
        weight_mask = keep.view(-1, 1, 1, 1).expand_as(conv.weight).to(conv.weight.dtype)
        _set_mask(conv, "weight", weight_mask.contiguous())
        if conv.bias is not None:
            _set_mask(conv, "bias", keep.to(conv.bias.dtype))
        bn = batchnorms.get(conv)
        if bn is not None and bn.affine:
            _set_mask(bn, "weight", keep.to(bn.weight.dtype))
            _set_mask(bn, "bias", keep.to(bn.bias.dtype))
    return model
