"""CIFAR models against the paper's sizes, and the MAC counter."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlas._compat import import_torchvision
from dlas.models.cifar import mobilenetv2, resnet18
from dlas.models.macs import count_macs, count_params

INPUT = (3, 32, 32)
# Paper, Table 2: parameters and MACs.
PAPER = {resnet18: (11.2e6, 557e6), mobilenetv2: (2.3e6, 98e6)}


def _close(value: float, reference: float, tolerance: float = 0.05) -> bool:
    return abs(value - reference) <= tolerance * reference


@pytest.mark.parametrize("factory", [resnet18, mobilenetv2], ids=["resnet18", "mobilenetv2"])
def test_width_1_matches_paper(factory: type) -> None:
    model = factory()
    params, macs = PAPER[factory]
    assert _close(count_params(model), params)
    # The paper's MACs count BatchNorm as thop does (see count_macs).
    assert _close(count_macs(model, INPUT, count_batchnorm=True), macs)


def test_exact_conv_linear_macs() -> None:
    assert count_macs(resnet18(), INPUT) == 555_422_720
    assert count_macs(mobilenetv2(), INPUT) == 91_154_944
    assert _close(count_macs(resnet18(), INPUT), 557e6)


@pytest.mark.parametrize("factory", [resnet18, mobilenetv2], ids=["resnet18", "mobilenetv2"])
def test_width_multiplier_and_classes(factory: type) -> None:
    full = factory()
    half = factory(num_classes=7, width_multiplier=0.5)
    assert count_params(half) < 0.3 * count_params(full)
    assert count_macs(half, INPUT) < 0.3 * count_macs(full, INPUT)
    half.eval()
    with torch.no_grad():
        assert half(torch.randn(2, *INPUT)).shape == (2, 7)
    assert all(m.bias is None for m in half.modules() if isinstance(m, nn.Conv2d))
    with pytest.raises(ValueError):
        factory(width_multiplier=0.0)


def test_mac_counter_grouped_and_linear() -> None:
    model = nn.Sequential(
        nn.Conv2d(8, 16, 3, padding=1, groups=4, bias=False),  # 16*10*10 * 2*3*3
        nn.Conv2d(16, 16, 3, padding=1, groups=16),  # depthwise: 16*10*10 * 1*3*3
        nn.Conv2d(16, 4, 1, stride=2),  # 4*5*5 * 16
        nn.Flatten(),
        nn.Linear(100, 10),  # 10 * 100
    )
    expected = 1600 * 18 + 1600 * 9 + 100 * 16 + 10 * 100
    assert count_macs(model, (8, 10, 10)) == expected
    assert count_macs(model, (1, 8, 10, 10)) == expected
    model.train()
    count_macs(model, (8, 10, 10))
    assert model.training  # mode restored
    assert not any(m._forward_hooks for m in model.modules())  # hooks removed


def test_torchvision_imports_through_compat() -> None:
    tv = import_torchvision()
    assert import_torchvision() is tv
    model = tv.models.mobilenet_v2(num_classes=10)
    assert count_params(model) > 2e6
