"""Parameter and multiply-accumulate counts, the paper's measure of model size and cost.

Two counting conventions (``count_macs(..., convention=...)``):

- ``"conv_linear"`` (the default, what the results table records): every Conv2d and Linear
  layer and nothing else. This is the work a compiled model does: at inference BatchNorm
  folds into the preceding convolution and pooling is negligible.
- ``"thop"``: what the thop profiler (``thop.profile``) reports, which is how the paper's
  Tables 2 and 5 were evidently counted. It adds 4 ops per BatchNorm element (2 to
  normalize, doubled for the affine transform), 1 per AvgPool output element and
  ``(window + 1)`` per AdaptiveAvgPool output element (the adds plus one divide);
  activations, max-pooling and functional calls (``F.avg_pool2d``) count nothing.

Which convention reproduces which paper number (width 1.0, batch 1):

=======================  =======  ===========  =======  ==================================
model (width 1.0)        paper    conv_linear  thop     reproduces the paper within 5%
=======================  =======  ===========  =======  ==================================
CIFAR ResNet18           557M     555.4M       557.9M   both
CIFAR MobileNetV2        98M      91.2M        98.1M    thop only (conv_linear: -7%)
CIFAR VGG-16             314M     313.2M       314.3M   both
CIFAR MobileNetV1        48M      46.4M        48.0M    both (thop exactly)
ResNet50 (ImageNet)      4.1G     4.09G        4.13G    both
DenseNet161              7.8G     7.73G        7.85G    both (thop closer)
EfficientNet-B0          415M     385.8M       415.1M   thop only (conv_linear: -7%)
MobileNetV2 (ImageNet)   327M     300.8M       327.5M   thop only (conv_linear: -8%)
=======================  =======  ===========  =======  ==================================

So the paper consistently used thop; its numbers that only thop reproduces are the small
depthwise networks, where BatchNorm is a large share of the work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import nn

Convention = Literal["conv_linear", "thop"]
CONVENTIONS: tuple[str, ...] = ("conv_linear", "thop")
#: (module, its input, its output) -> MACs charged for that call.
Counter = Callable[[nn.Module, torch.Tensor, torch.Tensor], int]
#: The convention the paper's Tables 2 and 5 were counted with.
PAPER_CONVENTION: Convention = "thop"

# thop's charge per BatchNorm element: 2 to normalize, doubled for the affine transform.
THOP_BATCHNORM_OPS = 4


def count_params(model: nn.Module) -> int:
    """All parameters, trainable or not (BatchNorm affine included, buffers excluded).

    Pruning reparametrizations (``weight_orig``) count once, like the weight they stand for.
    """
    return sum(p.numel() for p in model.parameters())


def _conv(module: nn.Module, _x: torch.Tensor, out: torch.Tensor) -> int:
    assert isinstance(module, nn.Conv2d)
    kh, kw = module.kernel_size
    return out.numel() * (module.in_channels // module.groups) * kh * kw


def _linear(module: nn.Module, _x: torch.Tensor, out: torch.Tensor) -> int:
    assert isinstance(module, nn.Linear)
    return out.numel() * module.in_features


def _batchnorm(module: nn.Module, x: torch.Tensor, _out: torch.Tensor) -> int:
    assert isinstance(module, nn.modules.batchnorm._BatchNorm)
    return (THOP_BATCHNORM_OPS if module.affine else THOP_BATCHNORM_OPS // 2) * x.numel()


def _avgpool(_module: nn.Module, _x: torch.Tensor, out: torch.Tensor) -> int:
    return out.numel()


def _adaptive_avgpool(_module: nn.Module, x: torch.Tensor, out: torch.Tensor) -> int:
    window = x.shape[-2:].numel() / out.shape[-2:].numel()
    return int((window + 1) * out.numel())


def _counter_for(module: nn.Module, convention: str) -> Counter | None:
    if isinstance(module, nn.Conv2d):
        return _conv
    if isinstance(module, nn.Linear):
        return _linear
    if convention == "thop":
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            return _batchnorm
        if isinstance(module, nn.AdaptiveAvgPool2d):
            return _adaptive_avgpool
        if isinstance(module, nn.AvgPool2d):
            return _avgpool
    return None


def count_macs(
    model: nn.Module, input_shape: Sequence[int], *, convention: Convention = "conv_linear"
) -> int:
    """MACs of one forward pass at batch size 1, counted by ``convention`` (module docstring).

    Conv2d: output elements x (in_channels / groups) x kh x kw, so depthwise and grouped
    convolutions count right. Linear: output elements x in_features. Biases are not
    counted. ``input_shape`` is (C, H, W); a leading batch dimension of 1 is also accepted.
    A model on the meta device is counted without computing anything (shapes only).
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown MAC convention {convention!r}; use one of {CONVENTIONS}")
    shape = tuple(input_shape)
    if len(shape) == 4:
        if shape[0] != 1:
            raise ValueError(f"count_macs counts batch size 1; got input shape {shape}")
        shape = shape[1:]
    total = 0

    def hook_with(counter: Counter) -> Callable[..., None]:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor,
                 ) -> None:
            nonlocal total
            total += counter(module, inputs[0], output)

        return hook

    handles = []
    for module in model.modules():
        counter = _counter_for(module, convention)
        if counter is not None:
            handles.append(module.register_forward_hook(hook_with(counter)))
    reference = next(model.parameters(), None)
    device = reference.device if reference is not None else torch.device("cpu")
    dtype = reference.dtype if reference is not None else torch.float32
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros((1, *shape), device=device, dtype=dtype))
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return total
