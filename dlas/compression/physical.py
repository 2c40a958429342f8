"""Physical channel pruning: take out the channels that channel pruning zeroed, leaving a
smaller dense model that computes exactly what the masked one did.

Channels are coupled: a conv's output channel is also a BatchNorm channel, an input
channel of the next conv, a channel of every tensor added to it on a residual path, and of
a depthwise conv that follows. torch-pruning's DependencyGraph finds these groups and
removes a channel from all of their members at once. Which channels may go is decided
here, so that removal never changes the function:

a channel of a group is removed only if every layer that *reads* it (the group's
input-channel members: convs and Linear layers) reads a structural zero there, whatever
the input image. Structural zeros are propagated through the model's torch.fx graph:
masked filters make zero conv outputs, a BatchNorm with zero scale and shift outputs zero,
ReLU / pooling / adding zeros keep them, and anything unknown is treated as non-zero. So
a ResNet channel on the residual path goes only when every block writing to it was pruned
there, and a MobileNetV2 expansion channel goes when its depthwise filter was pruned. The
result is checked against the masked model on random inputs before it is returned.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from dlas.compression.pruning import is_pruned, make_permanent

#: Modules and functions f with f(0) == 0 per channel (elementwise or per-channel pooling).
_ZERO_PRESERVING_MODULES = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.SiLU, nn.GELU, nn.Hardswish, nn.Identity, nn.Dropout,
    nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d,
)
_ZERO_PRESERVING_FUNCTIONS = {
    torch.relu, torch.relu_, F.relu, F.relu_, F.relu6, F.leaky_relu, F.silu, F.gelu,
    F.hardswish, F.dropout, F.max_pool2d, F.avg_pool2d, F.adaptive_avg_pool2d,
    F.adaptive_max_pool2d,
}
_ZERO_PRESERVING_METHODS = {"relu", "relu_", "contiguous", "clone"}
_ADD_FUNCTIONS = {operator.add, operator.iadd, operator.sub, operator.isub, torch.add, torch.sub}
_ADD_METHODS = {"add", "add_", "sub", "sub_"}
_MUL_FUNCTIONS = {operator.mul, operator.imul, torch.mul}
_MUL_METHODS = {"mul", "mul_"}
_RESHAPE_FUNCTIONS = {torch.flatten, torch.reshape}
_RESHAPE_METHODS = {"flatten", "view", "reshape"}

Mask = torch.Tensor  # bool per channel (dim 1): True where the value is always zero


def _shape(node: Any) -> tuple[int, ...] | None:
    meta = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    shape = getattr(meta, "shape", None)
    return tuple(int(s) for s in shape) if shape is not None else None


def _channels(node: fx.Node) -> int | None:
    shape = _shape(node)
    return shape[1] if shape is not None and len(shape) >= 2 else None


def _conv_rule(conv: nn.Conv2d, x: Mask) -> Mask:
    """Output channel o is zero when its bias is zero and each weight slice is zero or
    reads a zero input channel (grouped and depthwise convs read their group only)."""
    weight = conv.weight.detach()
    out_per_group = conv.out_channels // conv.groups
    in_per_group = conv.in_channels // conv.groups
    slice_zero = (weight.flatten(2) == 0).all(dim=2)  # [out, in_per_group]
    group = torch.arange(conv.out_channels) // out_per_group
    reads = group[:, None] * in_per_group + torch.arange(in_per_group)[None, :]
    out = (slice_zero | x[reads]).all(dim=1)
    if conv.bias is not None:
        out &= conv.bias.detach() == 0
    return out


def _linear_rule(linear: nn.Linear, x: Mask) -> Mask:
    out = ((linear.weight.detach() == 0) | x[None, :]).all(dim=1)
    if linear.bias is not None:
        out &= linear.bias.detach() == 0
    return out


def _batchnorm_rule(bn: nn.BatchNorm2d, x: Mask) -> Mask | None:
    if not bn.affine:
        return None
    gamma, beta = bn.weight.detach(), bn.bias.detach()
    out = (gamma == 0) & (beta == 0)
    if bn.track_running_stats and bn.running_mean is not None:
        shift = beta - gamma * bn.running_mean / torch.sqrt(bn.running_var + bn.eps)
        out |= x & (shift == 0)
    return out


def _module_rule(module: nn.Module, node: fx.Node, x: Mask | None) -> Mask | None:
    if x is None:
        return None
    if isinstance(module, nn.Conv2d) and len(x) == module.in_channels:
        return _conv_rule(module, x)
    if isinstance(module, nn.Linear) and len(_shape(node.args[0]) or ()) == 2:
        return _linear_rule(module, x)
    if isinstance(module, nn.BatchNorm2d):
        return _batchnorm_rule(module, x)
    if isinstance(module, _ZERO_PRESERVING_MODULES):
        return x
    if isinstance(module, nn.Flatten):
        return _reshape_rule(node, x)
    return None


def _reshape_rule(node: fx.Node, x: Mask) -> Mask | None:
    """[N, C, *S] -> [N, C * prod(S)] keeps channel-major order: each channel becomes
    prod(S) consecutive features. Other reshapes are not followed."""
    before, after = _shape(node.args[0]), _shape(node)
    if before is None or after is None or len(before) < 2 or len(after) != 2:
        return None
    spatial = math.prod(before[2:])
    if after[0] != before[0] or after[1] != before[1] * spatial:
        return None
    return x.repeat_interleave(spatial)


def _op_rule(node: fx.Node, zero: dict[fx.Node, Mask | None]) -> Mask | None:
    def mask(arg: Any) -> Mask | None:
        return zero.get(arg) if isinstance(arg, fx.Node) else None

    target, args = node.target, node.args
    is_method = node.op == "call_method"
    first = mask(args[0]) if args else None
    if (target in _ZERO_PRESERVING_METHODS) if is_method else (
            target in _ZERO_PRESERVING_FUNCTIONS):
        return first
    if (target in _RESHAPE_METHODS) if is_method else (target in _RESHAPE_FUNCTIONS):
        return None if first is None else _reshape_rule(node, first)
    if (target in _ADD_METHODS) if is_method else (target in _ADD_FUNCTIONS):
        # x + y is zero where both are; x + 0 is x; anything else is not followed.
        if len(args) < 2:
            return None
        a, b = args[0], args[1]
        if isinstance(a, fx.Node) and isinstance(b, fx.Node):
            ma, mb = mask(a), mask(b)
            if ma is None or mb is None or ma.shape != mb.shape:
                return None
            return ma & mb
        scalar = b if isinstance(a, fx.Node) else a
        return mask(a if isinstance(a, fx.Node) else b) if scalar == 0 else None
    if (target in _MUL_METHODS) if is_method else (target in _MUL_FUNCTIONS):
        # a product is zero where any factor is: use the factors whose masks are known.
        channels = _channels(node)
        known = [m for m in (mask(a) for a in args[:2]) if m is not None and len(m) == channels]
        if not known:
            return None
        out = known[0].clone()
        for m in known[1:]:
            out |= m
        return out
    if not is_method and target is torch.cat:
        tensors = args[0]
        dim = args[1] if len(args) > 1 else node.kwargs.get("dim", 0)
        rank = len(_shape(node) or ())
        masks = [mask(t) for t in tensors]
        if rank >= 2 and dim % rank == 1 and all(m is not None for m in masks):
            return torch.cat(masks)  # type: ignore[arg-type]
    return None


def zero_inputs(model: nn.Module, example: torch.Tensor) -> dict[nn.Module, Mask]:
    """For every Conv2d and Linear: which of its input channels are zero for every input
    (a bool per channel). Layers called more than once get the channels zero in all calls.
    """
    try:
        traced = fx.symbolic_trace(model)
    except Exception as err:  # fx raises many types for untraceable Python
        raise ValueError(
            f"physical channel pruning traces the model with torch.fx to find which channels "
            f"are always zero, and {type(model).__name__} cannot be traced: {err}") from err
    with torch.no_grad():
        ShapeProp(traced).propagate(example)
    modules = dict(traced.named_modules())
    zero: dict[fx.Node, Mask | None] = {}
    reads: dict[nn.Module, Mask] = {}
    for node in traced.graph.nodes:
        out: Mask | None = None
        if node.op == "call_module":
            module = modules[node.target]
            x = zero.get(node.args[0]) if node.args and isinstance(node.args[0], fx.Node) \
                else None
            if isinstance(module, (nn.Conv2d, nn.Linear)) and x is not None:
                reads[module] = x if module not in reads else reads[module] & x
            out = _module_rule(module, node, x)
        elif node.op in ("call_function", "call_method"):
            out = _op_rule(node, zero)
        channels = _channels(node)
        if out is None or channels is None or len(out) != channels:
            out = None if channels is None else torch.zeros(channels, dtype=torch.bool)
        zero[node] = out
    return reads


def _conv_params(model: nn.Module) -> int:
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Conv2d))


def remove_zero_channels(model: nn.Module, example: torch.Tensor,
                         *, check_inputs: int = 4) -> tuple[nn.Module, dict[str, Any]]:
    """Remove, in place, every conv channel whose removal cannot change the model's output
    (see the module docstring), with torch-pruning; return the model and facts about it.

    Pruning masks are made permanent first. At least one channel of every group is kept.
    The smaller model is checked against the original on ``check_inputs`` random inputs
    shaped like ``example``; a difference beyond float rounding raises RuntimeError.
    """
    import torch_pruning as tp

    if is_pruned(model):
        make_permanent(model)
    model.eval()
    generator = torch.Generator().manual_seed(0)
    probe = torch.randn((check_inputs, *example.shape[1:]), generator=generator)
    with torch.no_grad():
        expected = model(probe)
    reads = zero_inputs(model, example)
    params_before = sum(p.numel() for p in model.parameters())
    conv_before = _conv_params(model)
    channels_before = sum(m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d))

    with torch.enable_grad():
        graph = tp.DependencyGraph().build_dependency(model, example_inputs=example)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    plans: list[tuple[nn.Module, Any, list[int]]] = []
    for group in graph.get_all_groups(ignored_layers=linears, root_module_types=(nn.Conv2d,)):
        root = group[0]
        removable = set(root.root_idxs)
        readers = 0
        for item in group:
            handler = item.dep.handler
            # Layers that keep channels apart (BatchNorm, depthwise, elementwise) prune in
            # and out channels with one function; readers mix channels: conv, Linear.
            if (not graph.is_in_channel_pruning_fn(handler)
                    or graph.is_out_channel_pruning_fn(handler)):
                continue
            readers += 1
            read = reads.get(item.dep.target.module)
            if read is None:
                removable.clear()
                break
            for idx, root_idx in zip(item.idxs, item.root_idxs, strict=True):
                if idx >= len(read) or not bool(read[idx]):
                    removable.discard(root_idx)
        if readers == 0 or not removable:
            continue
        if len(removable) == len(root.root_idxs):
            removable.discard(min(removable))  # a layer needs at least one channel
        idxs = sorted(removable)
        if removable and graph.check_pruning_group(
                graph.get_pruning_group(root.dep.target.module, root.dep.handler, idxs)):
            plans.append((root.dep.target.module, root.dep.handler, idxs))
    for module, handler, idxs in plans:
        graph.get_pruning_group(module, handler, idxs).prune()

    with torch.no_grad():
        actual = model(probe)
    diff = float((actual - expected).abs().max()) if actual.shape == expected.shape else math.inf
    scale = max(1.0, float(expected.abs().max()))
    if diff > 1e-4 * scale:
        raise RuntimeError(
            f"removing zero channels changed the model's output (max |diff| {diff:.3g}); "
            "the model has an operation the zero analysis does not model correctly")
    channels_after = sum(m.out_channels for m in model.modules() if isinstance(m, nn.Conv2d))
    info = {
        "channels_before": channels_before,
        "channels_after": channels_after,
        "params_before": params_before,
        "params_after": sum(p.numel() for p in model.parameters()),
        "conv_weights_removed": 1.0 - _conv_params(model) / conv_before,
        "max_abs_diff_vs_masked": diff,
    }
    return model, info
