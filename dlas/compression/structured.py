"""Sparsity shaped for the sparse kernels: global L1 block pruning and N:M pruning of
convolution weights.

Unstructured pruning leaves each output channel its own pattern of zeros, so a sparse
kernel can share nothing between channels: the NCHWc block-CSR kernel keeps a 16-channel
column unless all 16 weights are zero (about 3% of columns at 80%), and the pixel-tile
kernel loads an input vector per non-zero. Pruning in blocks the kernels can use is the
across-stack half of "Fast Sparse ConvNets" (Elsen et al.): the same level of sparsity,
cheaper to skip, at some cost in accuracy, which is the trade-off a study measures.

Both view a conv weight as the (O, Cg*KH*KW) matrix the CSR kernels store:

* **block pruning**: blocks of `rows` consecutive output channels x `cols` consecutive
  columns (from channel 0 and column 0; blocks at an edge are smaller) compete in one
  ranking across every conv by their mean |w| (or, `scope: layer`, within each conv);
  whole blocks are masked, smallest first, until at least `level` of the conv weights
  are zero. `rows` at the SIMD width (16 on
  AVX-512, 8 on AVX2) with `cols` 1 is the NCHWc block-CSR kernel's vector: a pruned
  block is a column it skips. 4x1 is XNNPACK's multi-channel sparse kernel's shape; 1x4
  keeps runs of one channel's weights.
* **N:M pruning**: in every group of M consecutive input channels of one (output
  channel, tap), the M - N smallest |w| are masked (2:4 is the pattern NVIDIA's sparse
  tensor cores run, along the GEMM's reduction over input channels; a channel count that
  M does not divide leaves its last group proportionally pruned, so a depthwise conv,
  one input channel per group, stays dense, as NVIDIA's ASP leaves it). The level is
  (M - N) / M; levels are multiples of 1/M; the realised sparsity is recorded.

Masks are attached as `torch.nn.utils.prune` masks, merged with any mask already there,
so the iterative schedule (`pruning.iterative_pruning`) prunes further at each level and
fine-tuning keeps pruned weights at zero; Linear layers, biases and BatchNorm are never
pruned.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils import prune


def _convs(model: nn.Module) -> list[nn.Conv2d]:
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if not convs:
        raise ValueError("model has no Conv2d layers to prune")
    return convs


def _weight(conv: nn.Conv2d) -> torch.Tensor:
    """The weight as the forward pass sees it (orig x mask while masked)."""
    return conv.weight.detach()


def _mask(conv: nn.Conv2d, keep: torch.Tensor) -> None:
    """Mask `conv.weight` with `keep` (only ever adds zeros to an existing mask)."""
    existing = getattr(conv, "weight_mask", None)
    if isinstance(existing, torch.Tensor):
        keep = keep & existing.bool()
    prune.custom_from_mask(conv, "weight", mask=keep.to(conv.weight.dtype))


def block_scores(weight: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean |w| per block, weights per block) of `weight` viewed as (O, Cg*KH*KW), in
    blocks of `rows` x `cols` (edge blocks smaller), both of shape (ceil(O/rows),
    ceil(K/cols))."""
    matrix = weight.reshape(weight.shape[0], -1).abs()
    o, k = matrix.shape
    padded = torch.zeros(math.ceil(o / rows) * rows, math.ceil(k / cols) * cols,
                         dtype=matrix.dtype)
    present = torch.zeros_like(padded)
    padded[:o, :k] = matrix
    present[:o, :k] = 1
    shape = (padded.shape[0] // rows, rows, padded.shape[1] // cols, cols)
    sums = padded.reshape(shape).sum(dim=(1, 3))
    sizes = present.reshape(shape).sum(dim=(1, 3))
    return sums / sizes, sizes


def _expand(blocks: torch.Tensor, rows: int, cols: int, shape: torch.Size) -> torch.Tensor:
    """A per-block bool mask as a per-weight mask of the conv's `shape`."""
    full = blocks.repeat_interleave(rows, 0).repeat_interleave(cols, 1)
    o, k = shape[0], math.prod(shape[1:])
    return full[:o, :k].reshape(shape)


def prune_blocks_global_l1(model: nn.Module, level: float, rows: int, cols: int
                           ) -> nn.Module:
    """Mask the smallest blocks (see the module doc) until at least `level` of the conv
    weights are zero; works in place and returns `model`. Blocks already zero rank first,
    so a later, higher level prunes further."""
    _check_block(level, rows, cols)
    _prune_blocks(_convs(model), level, rows, cols)
    return model


def prune_blocks_per_layer_l1(model: nn.Module, level: float, rows: int, cols: int
                              ) -> nn.Module:
    """`prune_blocks_global_l1` with the blocks of each conv ranked within that conv:
    every conv at least `level` sparse."""
    _check_block(level, rows, cols)
    for conv in _convs(model):
        _prune_blocks([conv], level, rows, cols)
    return model


def _check_block(level: float, rows: int, cols: int) -> None:
    if not 0.0 <= level < 1.0:
        raise ValueError(f"level must be in [0, 1), got {level}")
    if rows < 1 or cols < 1:
        raise ValueError(f"a block needs at least one row and column, got {rows}x{cols}")


def _prune_blocks(convs: list[nn.Conv2d], level: float, rows: int, cols: int) -> None:
    """Mask the smallest blocks of `convs`, ranked together, to at least `level`."""
    scores, sizes, owners = [], [], []
    for index, conv in enumerate(convs):
        score, size = block_scores(_weight(conv), rows, cols)
        scores.append(score.flatten())
        sizes.append(size.flatten())
        owners.append(torch.full((score.numel(),), index, dtype=torch.long))
    score, size, owner = torch.cat(scores), torch.cat(sizes), torch.cat(owners)
    total = int(size.sum())
    target = math.ceil(level * total - 1e-9)
    order = torch.argsort(score, stable=True)
    cumulative = torch.cumsum(size[order], 0)
    count = int(torch.searchsorted(cumulative, torch.tensor(float(target))).item())
    if target > 0:
        count += 1  # the block whose weights reach the target
    pruned = torch.zeros(score.numel(), dtype=torch.bool)
    pruned[order[:count]] = True
    start = 0
    for index, conv in enumerate(convs):
        n = int((owner == index).sum())
        blocks = pruned[start:start + n].reshape(block_scores(_weight(conv), rows, cols)[0].shape)
        start += n
        _mask(conv, ~_expand(blocks, rows, cols, conv.weight.shape))


def prune_n_of_m(model: nn.Module, level: float, m: int) -> nn.Module:
    """Keep the N = M * (1 - level) largest |w| of every group of M consecutive input
    channels of each (output channel, tap); works in place and returns `model`."""
    keep_count = m * (1.0 - level)
    if m < 2 or not 0.0 <= level < 1.0 or abs(keep_count - round(keep_count)) > 1e-6:
        raise ValueError(f"N:M pruning needs a level that is a multiple of 1/M below 1 "
                         f"(M={m}), got {level}")
    keep_n = int(round(keep_count))
    for conv in _convs(model):
        weight = _weight(conv)
        o, cg, kh, kw = weight.shape
        # (O, KH, KW, Cg): groups along the input channels of one output channel and tap
        taps = weight.permute(0, 2, 3, 1).abs()
        groups = math.ceil(cg / m)
        padded = torch.full((o, kh, kw, groups * m), -1.0, dtype=taps.dtype)
        padded[..., :cg] = taps
        grouped = padded.reshape(o, kh, kw, groups, m)
        ranks = torch.argsort(torch.argsort(grouped, dim=-1, descending=True, stable=True),
                              dim=-1)
        # a short last group keeps its share: ceil(N * size / M) of its weights
        sizes = torch.full((groups,), m)
        sizes[-1] = cg - (groups - 1) * m
        kept = torch.ceil(keep_n * sizes / m).to(torch.long)
        keep = (ranks < kept.view(1, 1, 1, groups, 1)).reshape(o, kh, kw, groups * m)
        _mask(conv, keep[..., :cg].permute(0, 3, 1, 2).contiguous())
    return model


__all__ = ["block_scores", "prune_blocks_global_l1", "prune_blocks_per_layer_l1",
           "prune_n_of_m"]
