"""Global L1 weight pruning: exact sparsity, conv weights only, permanence, fine-tuning."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dlas.compression.pruning import (
    _split_epochs,
    conv_sparsity,
    is_pruned,
    iterative_weight_pruning,
    make_permanent,
    prune_weights_global_l1,
)
from dlas.datasets.digits import load_digits
from dlas.models.cifar import mobilenetv2, resnet18
from dlas.models.training import FitSettings, fine_tune, seed_all


def _conv_zeros(model: nn.Module) -> tuple[int, int]:
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    return sum(int((m.weight == 0).sum()) for m in convs), sum(m.weight.numel() for m in convs)


@pytest.mark.parametrize("factory", [resnet18, mobilenetv2], ids=["resnet18", "mobilenetv2"])
def test_exact_sparsity(factory: type) -> None:
    seed_all(0)
    model = factory(width_multiplier=0.25)
    for level in (0.5, 0.6, 0.9, 0.95, 0.99):
        prune_weights_global_l1(model, level)
        zeros, total = _conv_zeros(model)
        assert zeros == round(level * total)
        assert conv_sparsity(model) == pytest.approx(level, abs=1 / total)


def test_only_conv_weights_pruned() -> None:
    seed_all(0)
    model = mobilenetv2(width_multiplier=0.25)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prune_weights_global_l1(model, 0.9)
    after = model.state_dict()
    conv_names = {n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    for key, value in before.items():
        module = key.rsplit(".", 1)[0]
        if module in conv_names and key.endswith(".weight"):
            assert f"{module}.weight_mask" in after
        else:
            assert torch.equal(after[key], value), key
    assert not any(k.startswith("linear.") and "mask" in k for k in after)


def test_make_permanent() -> None:
    seed_all(0)
    model = resnet18(width_multiplier=0.125).eval()
    prune_weights_global_l1(model, 0.8)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
    make_permanent(model)
    assert not is_pruned(model)
    keys = model.state_dict().keys()
    assert not any(k.endswith(("_orig", "_mask")) for k in keys)
    assert conv_sparsity(model) == pytest.approx(0.8, abs=1e-5)
    with torch.no_grad():
        assert torch.equal(model(x), expected)
    # Pruning a permanent model further still lands exactly.
    prune_weights_global_l1(model, 0.9)
    zeros, total = _conv_zeros(model)
    assert zeros == round(0.9 * total)


def test_invalid_levels() -> None:
    model = resnet18(width_multiplier=0.125)
    prune_weights_global_l1(model, 0.6)
    with pytest.raises(ValueError):
        prune_weights_global_l1(model, 0.5)
    with pytest.raises(ValueError):
        prune_weights_global_l1(model, 1.0)
    with pytest.raises(ValueError):
        prune_weights_global_l1(nn.Linear(3, 3), 0.5)


def test_split_epochs() -> None:
    assert _split_epochs(210, 8) == [27, 27, 26, 26, 26, 26, 26, 26]
    assert _split_epochs(1, 3) == [1, 0, 0]


@pytest.fixture(scope="module")
def digits():  # noqa: ANN201
    return load_digits()


def test_fine_tune_keeps_permanent_zeros(digits) -> None:  # noqa: ANN001
    seed_all(0)
    model = resnet18(width_multiplier=0.125)
    make_permanent(prune_weights_global_l1(model, 0.7))
    zero_mask = [m.weight == 0 for m in model.modules() if isinstance(m, nn.Conv2d)]
    fine_tune(model, digits, 1, settings=FitSettings(data_fraction=0.2, progress=False))
    assert not is_pruned(model)  # temporary masks removed again
    now = [m.weight == 0 for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert all(torch.equal(a, b) for a, b in zip(zero_mask, now, strict=True))


def test_iterative_schedule(digits, tmp_path) -> None:  # noqa: ANN001
    seed_all(0)
    model = resnet18(width_multiplier=0.125)
    model, records = iterative_weight_pruning(
        model, digits, [0.5, 0.8], finetune_epochs=2,
        settings=FitSettings(data_fraction=0.2, progress=False, checkpoint_dir=tmp_path),
    )
    assert [r["level"] for r in records] == [0.5, 0.8]
    assert [r["finetune_epochs"] for r in records] == [1, 1]
    for record in records:
        assert record["sparsity"] == pytest.approx(record["level"], abs=1e-4)
        assert 0.0 <= record["accuracy"] <= 1.0
    assert not is_pruned(model)
    assert conv_sparsity(model) == pytest.approx(0.8, abs=1e-4)
    assert len(list(tmp_path.iterdir())) == 2
