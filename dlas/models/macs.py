"""Parameter and multiply-accumulate counts, the paper's measure of model size and cost."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def count_params(model: nn.Module) -> int:
    """All parameters, trainable or not (BatchNorm affine included, buffers excluded).

    Pruning reparametrizations (``weight_orig``) count once, like the weight they stand for.
    """
    return sum(p.numel() for p in model.parameters())


# thop's charge per BatchNorm element: 2 to normalize, doubled for the affine transform.
THOP_BATCHNORM_OPS = 4


def count_macs(
    model: nn.Module, input_shape: Sequence[int], *, count_batchnorm: bool = False
) -> int:
    """MACs of one forward pass at batch size 1, over every Conv2d and Linear layer.

    Conv2d: output elements x (in_channels / groups) x kh x kw, so depthwise and grouped
    convolutions count right. Linear: output elements x in_features. Biases, activations
    and pooling are not counted. ``input_shape`` is (C, H, W); a leading batch dimension
    of 1 is also accepted.

    ``count_batchnorm`` adds thop's 4 ops per BatchNorm output element. The paper's
    Table 2 evidently counted that way: it reproduces their 98M for MobileNetV2 (conv and
    linear alone give 91M, as BatchNorm is a large share of so small a network) and 557M
    for ResNet18 (555M without).
    """
    shape = tuple(input_shape)
    if len(shape) == 4:
        if shape[0] != 1:
            raise ValueError(f"count_macs counts batch size 1; got input shape {shape}")
        shape = shape[1:]
    total = 0

    def conv_hook(module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        nonlocal total
        assert isinstance(module, nn.Conv2d)
        kh, kw = module.kernel_size
        total += output.numel() * (module.in_channels // module.groups) * kh * kw

    def linear_hook(module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        nonlocal total
        assert isinstance(module, nn.Linear)
        total += output.numel() * module.in_features

    def batchnorm_hook(_module: nn.Module, _inputs: object, output: torch.Tensor) -> None:
        nonlocal total
        total += THOP_BATCHNORM_OPS * output.numel()

    handles = []
    for module in model.modules():
        if count_batchnorm and isinstance(module, nn.modules.batchnorm._BatchNorm):
            handles.append(module.register_forward_hook(batchnorm_hook))
        elif isinstance(module, nn.Conv2d):
            handles.append(module.register_forward_hook(conv_hook))
        elif isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(linear_hook))
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
