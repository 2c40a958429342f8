"""Channel pruning: exact filter counts, pruned channels carry nothing, and the physical
removal of the pruned channels gives a smaller model computing the same function."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from dlas.compression.channel import (
    batchnorm_after_conv,
    prune_channels_global_l1,
    zero_filter_count,
)
from dlas.compression.options import (
    ChannelPruningParams,
    channel_pruning,
    channel_pruning_physical,
)
from dlas.compression.physical import remove_zero_channels, zero_inputs
from dlas.compression.pruning import conv_sparsity, is_pruned, make_permanent
from dlas.datasets.digits import load_digits
from dlas.models.cifar import mobilenetv2, resnet18
from dlas.models.seeding import seed_all
from dlas.models.training import FitSettings
from dlas.sweep.config import Budgets
from tests.plugins.tiny_cnn import TinyCNN

FACTORIES = {
    "tiny_cnn": lambda: TinyCNN(10),
    "resnet18": lambda: resnet18(width_multiplier=0.125),
    "mobilenetv2": lambda: mobilenetv2(width_multiplier=0.25),
}


def _model(name: str) -> nn.Module:
    """An untrained model whose BatchNorms look trained (non-trivial statistics, scale and
    shift), so a pruned channel that leaked its BatchNorm shift would show."""
    seed_all(0)
    model = FACTORIES[name]()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


def _filters(model: nn.Module) -> list[tuple[nn.Conv2d, torch.Tensor]]:
    """Each conv with its bool per filter: all weights zero."""
    return [(m, (m.weight.detach().flatten(1) == 0).all(dim=1))
            for m in model.modules() if isinstance(m, nn.Conv2d)]


@pytest.mark.parametrize("name", list(FACTORIES))
def test_exact_filter_counts_and_pruned_channels_carry_nothing(name: str) -> None:
    model = _model(name)
    batchnorms = batchnorm_after_conv(model)
    assert batchnorms  # every model here has conv -> BatchNorm pairs
    previous: list[torch.Tensor] | None = None
    for level in (0.05, 0.3, 0.5, 0.9, 0.99):
        prune_channels_global_l1(model, level, batchnorms)
        zeros, total = zero_filter_count(model)
        assert zeros == round(level * total)
        pruned = [z for _, z in _filters(model)]
        if previous is not None:  # pruned filters stay pruned
            assert all(bool((p <= z).all()) for p, z in zip(previous, pruned, strict=True))
        previous = pruned
    for conv, zero in _filters(model):
        if conv.bias is not None:
            assert bool((conv.bias.detach()[zero] == 0).all())
        bn = batchnorms.get(conv)
        if bn is not None:  # the BatchNorm does not turn the zero filter into a constant
            assert bool((bn.weight.detach()[zero] == 0).all())
            assert bool((bn.bias.detach()[zero] == 0).all())
            assert bool((bn.weight.detach()[~zero] != 0).all())


def test_ranking_is_global_by_l1_norm() -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 1, bias=False), nn.Conv2d(2, 2, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([3.0, 0.5]).view(2, 1, 1, 1))
        model[1].weight.copy_(torch.tensor([[1.0, 1.0], [0.2, -0.2]]).view(2, 2, 1, 1))
    prune_channels_global_l1(model, 0.5)
    # norms: 3, 0.5 | 2, 0.4 -> the two smallest go, one in each layer
    assert [z.tolist() for _, z in _filters(model)] == [[False, True], [False, True]]


def test_invalid_levels_and_models() -> None:
    model = _model("tiny_cnn")
    prune_channels_global_l1(model, 0.5)
    with pytest.raises(ValueError, match="more than level"):
        prune_channels_global_l1(model, 0.25)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        prune_channels_global_l1(model, 1.0)
    with pytest.raises(ValueError, match="no Conv2d"):
        prune_channels_global_l1(nn.Linear(3, 3), 0.5)

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x) if x.sum() > 0 else x  # data-dependent: fx cannot trace

    with pytest.raises(ValueError, match="cannot be traced"):
        prune_channels_global_l1(Branchy(), 0.5)


# --- physical removal ----------------------------------------------------------------------


def _out_channels(model: nn.Module) -> dict[str, int]:
    return {n: m.out_channels for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}


@pytest.mark.parametrize(("name", "level"), [("tiny_cnn", 0.9), ("resnet18", 0.6),
                                             ("mobilenetv2", 0.3)])
def test_physical_model_computes_what_the_masked_one_did(name: str, level: float) -> None:
    masked = make_permanent(prune_channels_global_l1(_model(name), level))
    x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = masked(x)
    physical, info = remove_zero_channels(copy.deepcopy(masked), torch.randn(1, 3, 32, 32))
    params = sum(p.numel() for p in physical.parameters())
    assert params == info["params_after"] < info["params_before"]
    assert info["channels_after"] < info["channels_before"]
    assert sum(_out_channels(physical).values()) == info["channels_after"]
    with torch.no_grad():
        torch.testing.assert_close(physical(x), expected, rtol=1e-4, atol=1e-5)
    # what the compiler stage imports: the exported program computes the same
    exported = torch.export.export(physical, (x[:1],))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x[:1]), expected[:1], rtol=1e-4, atol=1e-5)


def _zero_channel(conv: nn.Conv2d, bn: nn.BatchNorm2d | None, c: int) -> None:
    with torch.no_grad():
        conv.weight[c] = 0
        if bn is not None:
            bn.weight[c] = 0
            bn.bias[c] = 0


def test_residual_channel_goes_only_when_every_writer_was_pruned() -> None:
    model = _model("resnet18")
    stem, blocks = (model.conv1, model.bn1), [model.layer1[0], model.layer1[1]]
    c = 3
    _zero_channel(*stem, c)
    before = _out_channels(model)
    # the stem's channel is zero, but both blocks still add into it: nothing can go
    partial, _ = remove_zero_channels(copy.deepcopy(model), torch.randn(1, 3, 32, 32))
    assert _out_channels(partial) == before
    # a zero filter whose BatchNorm still adds its shift is a constant channel, not a zero
    for block in blocks:
        _zero_channel(block.conv2, None, c)
    kept, _ = remove_zero_channels(copy.deepcopy(model), torch.randn(1, 3, 32, 32))
    assert _out_channels(kept) == before
    # every writer of the residual channel pruned: it goes from all of them and the readers
    for block in blocks:
        _zero_channel(block.conv2, block.bn2, c)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
    removed, _ = remove_zero_channels(model, torch.randn(1, 3, 32, 32))
    after = _out_channels(removed)
    for conv in ("conv1", "layer1.0.conv2", "layer1.1.conv2"):
        assert after[conv] == before[conv] - 1
    assert removed.layer1[0].conv1.in_channels == before["conv1"] - 1
    assert sum(after.values()) == sum(before.values()) - 3
    with torch.no_grad():
        torch.testing.assert_close(removed(x), expected, rtol=1e-4, atol=1e-5)


def test_pruned_depthwise_filter_removes_its_expansion_channel() -> None:
    model = _model("mobilenetv2")
    block = model.layers[3]
    planes = block.conv2.out_channels
    _zero_channel(block.conv2, block.bn2, 5)
    reads = zero_inputs(model, torch.randn(1, 3, 32, 32))
    assert reads[block.conv3].tolist() == [i == 5 for i in range(planes)]
    removed, _ = remove_zero_channels(model, torch.randn(1, 3, 32, 32))
    assert block.conv1.out_channels == block.conv2.groups == block.conv3.in_channels == planes - 1
    assert block.bn1.num_features == block.bn2.num_features == planes - 1


def test_every_channel_zero_keeps_one() -> None:
    model = _model("tiny_cnn")
    for conv, bn in ((model.stem[0], model.stem[1]), (model.pw, None)):
        for c in range(8):
            _zero_channel(conv, bn, c)
    with torch.no_grad():
        model.pw.bias.zero_()
    removed, info = remove_zero_channels(model, torch.randn(1, 3, 32, 32))
    assert _out_channels(removed) == {"stem.0": 1, "dw": 1, "pw": 1}
    assert removed.head.in_features == 1


# --- the options, end to end on a tiny model (real fine-tuning) ----------------------------


@pytest.fixture(scope="module")
def digits():  # noqa: ANN201
    return load_digits()


def _ctx(bundle, tmp_path, dense_accuracy: float | None = 1.0) -> SimpleNamespace:  # noqa: ANN001
    return SimpleNamespace(
        bundle=bundle, budgets=Budgets(finetune_epochs=2, finetune_lr=0.01, batch_size=64),
        dense_accuracy=dense_accuracy, model_name="tiny_cnn",
        fit_settings=FitSettings(batch_size=64, data_fraction=0.2, progress=False,
                                 checkpoint_dir=tmp_path))


def test_channel_pruning_options(digits, tmp_path) -> None:  # noqa: ANN001
    params = ChannelPruningParams(levels=[0.5, 0.9])
    # dense accuracy 1.0 and 1 point allowed: no level can stay within, so the lowest
    masked = channel_pruning(params, _model("tiny_cnn"), _ctx(digits, tmp_path))
    info = masked.info
    assert [lv["level"] for lv in info["levels"]] == [0.5, 0.9]
    assert (info["chosen_level"], info["within_drop"]) == (0.5, False)
    assert "no level stays within" in info["selection"]
    assert info["compression_ratio"] == pytest.approx(2.0) and info["max_drop"] == 0.01
    assert zero_filter_count(masked.model) == (12, 24)
    assert info["chosen_sparsity"] == pytest.approx(conv_sparsity(masked.model))
    assert not is_pruned(masked.model)
    json.dumps(info)
    # the physical variant runs the same schedule (the fine-tuned levels are reused from
    # the checkpoints) and removes what can go, computing the same function
    params = ChannelPruningParams(levels=[0.5, 0.9], level=0.9)
    masked = channel_pruning(params, _model("tiny_cnn"), _ctx(digits, tmp_path))
    physical = channel_pruning_physical(params, _model("tiny_cnn"), _ctx(digits, tmp_path))
    assert physical.info["levels"] == masked.info["levels"]
    assert physical.info["chosen_level"] == 0.9
    assert physical.info["params_after"] < physical.info["params_before"]
    assert sum(p.numel() for p in physical.model.parameters()) == physical.info["params_after"]
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(physical.model(x), masked.model(x), rtol=1e-4, atol=1e-5)
    json.dumps(physical.info)


@pytest.mark.slow
def test_channel_pruned_models_compile_and_verify_through_tvm(tmp_path) -> None:  # noqa: ANN001
    """Both channel pruning options through the whole runner: the masked model and the
    physically smaller one compile with TVM and match PyTorch."""
    from dlas.results.store import ResultStore
    from dlas.runner.runner import Runner
    from dlas.runner.workspace import Workspace
    from dlas.sweep.config import parse_config
    from tests.conftest import tiny_sweep

    params = "    params: {levels: [0.5, 0.9], level: 0.9}"
    text = tiny_sweep(compression=["none"]).replace(
        "  - none", f"  - name: channel_pruning\n{params}\n"
                    f"  - name: channel_pruning_physical\n{params}")
    report = Runner(Workspace(tmp_path), progress=False).run(parse_config(text))
    assert report.ok == 2, [r.error for r in report.rows]
    with ResultStore(tmp_path / "results.db") as store:
        rows = {"physical" in r.compression: r for r in store.rows()}
    masked, physical = rows[False], rows[True]
    for row in (masked, physical):
        assert row.verified == 1 and row.top1_agreement == 1.0
        assert row.compression_info["chosen_level"] == 0.9
    assert physical.params < masked.params
    assert physical.macs < masked.macs
    assert physical.accuracy == pytest.approx(masked.accuracy)
