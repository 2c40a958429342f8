"""Block pruning and N:M pruning (dlas/compression/structured.py) and their options: the
shape of the zeros, the level reached, iteration, and the options' records."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from dlas.compression.options import (
    BlockPruningParams,
    NMPruningParams,
    block_pruning,
    nm_pruning,
)
from dlas.compression.pruning import conv_sparsity, is_pruned, make_permanent
from dlas.compression.structured import block_scores, prune_blocks_global_l1, prune_n_of_m
from dlas.models.cifar import mobilenetv2, resnet18
from dlas.models.seeding import seed_all
from dlas.models.training import FitSettings
from dlas.sweep.config import Budgets


def _model(factory: type = resnet18) -> nn.Module:
    seed_all(0)
    return factory(num_classes=10, width_multiplier=0.5).eval()


def _convs(model: nn.Module) -> list[nn.Conv2d]:
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)]


@pytest.mark.parametrize("block", [(16, 1), (8, 1), (4, 1), (1, 4)])
@pytest.mark.parametrize("factory", [resnet18, mobilenetv2], ids=["resnet18", "mobilenetv2"])
def test_blocks_are_pruned_whole_and_reach_the_level(factory: type, block: tuple) -> None:
    rows, cols = block
    model = make_permanent(prune_blocks_global_l1(_model(factory), 0.8, rows, cols))
    sparsity = conv_sparsity(model)
    assert 0.8 <= sparsity < 0.8 + 0.01  # at least the level, by less than a block or so
    for conv in _convs(model):
        matrix = conv.weight.detach().reshape(conv.out_channels, -1)
        zero_blocks = block_scores(matrix.reshape(conv.weight.shape), rows, cols)[0] == 0
        expanded = zero_blocks.repeat_interleave(rows, 0).repeat_interleave(cols, 1)
        expanded = expanded[:matrix.shape[0], :matrix.shape[1]]
        # every zero weight lies in a block that is zero as a whole (a trained weight is
        # never exactly zero by chance here)
        assert torch.equal(matrix == 0, expanded)


def test_block_pruning_is_iterative_and_keeps_earlier_blocks() -> None:
    model = prune_blocks_global_l1(_model(), 0.5, 16, 1)
    first = [conv.weight.detach() == 0 for conv in _convs(model)]
    prune_blocks_global_l1(model, 0.9, 16, 1)
    assert conv_sparsity(model) >= 0.9
    for zero_before, conv in zip(first, _convs(model), strict=True):
        assert bool((conv.weight.detach() == 0)[zero_before].all())


def test_block_rows_match_the_nchwc_block_csr_vectors() -> None:
    """A (16, 1) block is a column of one 16-channel vector: the NCHWc block-CSR arrays
    store only the vectors some weight of the block keeps."""
    import numpy as np

    from dlas.algorithms.csr import block_csr_from_weight

    model = make_permanent(prune_blocks_global_l1(_model(), 0.8, 16, 1))
    conv = _convs(model)[5]  # 32 -> 64 channels: whole blocks
    weight = conv.weight.detach().numpy()
    arrays = block_csr_from_weight(weight, 16)
    kept_columns = int((np.abs(weight).reshape(4, 16, -1).sum(axis=1) > 0).sum())
    assert len(arrays["csr_data"]) == max(kept_columns, 4)  # one stored zero per empty row
    assert np.count_nonzero(arrays["csr_data"]) == np.count_nonzero(weight)


@pytest.mark.parametrize(("level", "kept"), [(0.5, 2), (0.25, 3), (0.75, 1)])
def test_n_of_m_keeps_the_largest_n_in_every_group(level: float, kept: int) -> None:
    model = _model()
    reference = copy.deepcopy(model)
    make_permanent(prune_n_of_m(model, level, 4))
    for conv, dense in zip(_convs(model), _convs(reference), strict=True):
        o, cg, kh, kw = conv.weight.shape
        if cg % 4:
            continue  # the 3-channel stem: a short group, proportionally pruned
        groups = conv.weight.detach().permute(0, 2, 3, 1).reshape(-1, 4)
        original = dense.weight.detach().permute(0, 2, 3, 1).reshape(-1, 4)
        assert bool(((groups != 0).sum(dim=1) == kept).all())
        # the kept ones are the largest of their group
        threshold = original.abs().sort(dim=1, descending=True).values[:, kept - 1:kept]
        assert bool((groups[groups != 0].abs() >= 0).all())
        assert bool(((original.abs() >= threshold) == (groups != 0)).all())


def test_n_of_m_levels_must_be_whole_counts() -> None:
    with pytest.raises(ValueError, match="multiple of 1/M"):
        prune_n_of_m(_model(), 0.3, 4)
    with pytest.raises(ValidationError, match="multiple of 1/m"):
        NMPruningParams(levels=[0.3])
    with pytest.raises(ValidationError, match="block sizes"):
        BlockPruningParams(block=(0, 1))


@pytest.fixture(scope="module")
def digits():  # noqa: ANN201
    from dlas.datasets.digits import load_digits

    return load_digits()


def _ctx(bundle, tmp_path) -> SimpleNamespace:  # noqa: ANN001
    return SimpleNamespace(
        bundle=bundle, budgets=Budgets(finetune_epochs=2, finetune_lr=0.01, batch_size=64,
                                       seed=0),
        dense_accuracy=0.9, model_name="tiny_cnn",
        fit_settings=FitSettings(batch_size=64, data_fraction=0.2, progress=False,
                                 checkpoint_dir=tmp_path))


def _tiny() -> nn.Module:
    from tests.plugins.tiny_cnn import TinyCNN

    seed_all(0)
    return TinyCNN(10)


def test_block_pruning_option_fine_tunes_and_records(digits, tmp_path) -> None:  # noqa: ANN001
    params = BlockPruningParams(levels=[0.5, 0.75], level=0.75, block=(4, 1))
    result = block_pruning(params, _tiny(), _ctx(digits, tmp_path))
    info = result.info
    assert [lv["level"] for lv in info["levels"]] == [0.5, 0.75]
    assert info["chosen_level"] == 0.75 and info["block"] == [4, 1]
    assert conv_sparsity(result.model) >= 0.75
    assert not is_pruned(result.model)
    json.dumps(info)


def test_nm_pruning_option_fine_tunes_and_records(digits, tmp_path) -> None:  # noqa: ANN001
    result = nm_pruning(NMPruningParams(), _tiny(), _ctx(digits, tmp_path))
    assert result.info["chosen_level"] == 0.5 and result.info["m"] == 4
    # 2:4 along input channels: the 8 -> 8 pointwise conv exactly half; the depthwise conv
    # (one input channel per group) is left dense, the 3-channel stem keeps 2 of 3
    model = result.model
    assert float((model.pw.weight == 0).float().mean()) == 0.5
    assert int((model.dw.weight == 0).sum()) == 0
    assert 0.0 < conv_sparsity(model) < 0.5
    json.dumps(result.info)


def test_layer_scope_prunes_every_conv_to_the_level() -> None:
    """Global ranking leaves ResNet18's first stage far denser than its last; per layer,
    every conv is pruned to the level (blocks: at least the level, by under a block)."""
    from dlas.compression.pruning import prune_weights_global_l1, prune_weights_per_layer_l1
    from dlas.compression.structured import prune_blocks_per_layer_l1

    spread = [float((c.weight == 0).float().mean())
              for c in _convs(make_permanent(prune_weights_global_l1(_model(), 0.9)))]
    assert max(spread) - min(spread) > 0.3  # what the global ranking does
    model = prune_weights_per_layer_l1(_model(), 0.5)
    prune_weights_per_layer_l1(model, 0.9)  # iterative: further, masks kept
    for conv in _convs(make_permanent(model)):
        assert float((conv.weight == 0).float().mean()) == pytest.approx(0.9, abs=0.01)
    blocked = make_permanent(prune_blocks_per_layer_l1(_model(), 0.8, 16, 1))
    for conv in _convs(blocked):
        n = conv.weight.numel()
        block = min(16, conv.out_channels)
        assert 0.8 <= float((conv.weight == 0).float().mean()) < 0.8 + 16 * block / n + 0.01


def test_scope_is_a_parameter_of_both_options() -> None:
    from dlas.compression.options import WeightPruningParams

    assert WeightPruningParams().scope == "global"
    assert BlockPruningParams(scope="layer").scope == "layer"
    with pytest.raises(ValidationError):
        WeightPruningParams(scope="model")
