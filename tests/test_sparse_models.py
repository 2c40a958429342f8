"""Whole pruned models through the compiler with the sparse kernels: each sparsity shape
dlas makes (unstructured, block, N:M) x the sparse algorithms, against PyTorch; and the
mixed algorithm's per-conv choice and its reorders."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from dlas import registry
from dlas.algorithms.base import ConvSpec
from dlas.algorithms.mixed_csr import (
    DENSE_ABOVE_BY_BITS,
    DENSE_ABOVE_THIN_BY_BITS,
    MixedCSRConv,
    default_dense_above,
)
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import import_torch_model
from dlas.compression.pruning import (
    make_permanent,
    prune_weights_global_l1,
    prune_weights_per_layer_l1,
)
from dlas.compression.structured import prune_blocks_global_l1, prune_n_of_m
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.targets.host import host_target
from dlas.tir.schedule_helpers import forced_simd

PRUNINGS = {
    "unstructured": lambda m: prune_weights_global_l1(m, 0.9),
    "block16x1": lambda m: prune_blocks_global_l1(m, 0.8, 16, 1),
    "block4x1": lambda m: prune_blocks_global_l1(m, 0.8, 4, 1),
    "2:4": lambda m: prune_n_of_m(m, 0.5, 4),
    "pointwise": lambda m: prune_weights_per_layer_l1(m, 0.9, "pointwise"),
}
ALGORITHMS = [("spatial_pack_csr", {}), ("mixed_csr", {}), ("direct_csr", {"layout": "NCHWc"})]


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = registry.create("models", name, {"width_multiplier": 0.5}, num_classes=10,
                            input_shape=(3, 32, 32))
    with torch.no_grad():  # batch-norm statistics away from identity, as after training
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return model.eval()


#: (model, pruning, algorithms): every sparsity shape and every sparse algorithm at least
#: once, both models with the unstructured and the SIMD-width block shapes.
CASES = [
    ("resnet18", "unstructured", ALGORITHMS),
    ("resnet18", "block16x1", ALGORITHMS),
    ("resnet18", "block4x1", ALGORITHMS[:1]),
    ("resnet18", "2:4", ALGORITHMS[1:2]),
    ("mobilenetv2", "unstructured", ALGORITHMS),
    ("mobilenetv2", "block16x1", ALGORITHMS[1:]),
    ("mobilenetv2", "pointwise", ALGORITHMS[:2]),
]


@pytest.mark.parametrize(("model_name", "pruning", "algorithms"), CASES,
                         ids=[f"{m}-{p}" for m, p, _ in CASES])
def test_pruned_models_match_pytorch(model_name: str, pruning: str, algorithms: list,
                                     tmp_path: Path) -> None:
    model = make_permanent(PRUNINGS[pruning](copy.deepcopy(_model(model_name)))).eval()
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(x).numpy()
    imported = import_torch_model(model, (1, 3, 32, 32))
    for name, params in algorithms:
        compiled = compile_model(imported, registry.create("algorithms", name, params),
                                 host_target(), tmp_path / name)
        got = run_batch(load_vm(compiled.executable_path), x.numpy())
        check = verify_outputs(got, ref)
        assert check.passed, f"{name} on {pruning}: {check.explain()}"
        assert np.array_equal(got.argmax(1), ref.argmax(1))


def test_mixed_takes_the_sparse_kernel_where_the_weight_is_sparse(tmp_path: Path) -> None:
    """Global L1 leaves ResNet18's early convs dense-ish and its late ones nearly empty:
    the mixed algorithm computes the late ones sparse in NCHW, the others dense in NCHWc,
    and the layout report says which and why."""
    model = make_permanent(prune_weights_global_l1(_model("resnet18"), 0.9)).eval()
    imported = import_torch_model(model, (1, 3, 32, 32))
    compiled = compile_model(imported, MixedCSRConv(dense_above=0.35), host_target(),
                             tmp_path)
    layout = compiled.layout
    sparse = [line for line in layout["kept_nchw"] if "pixel-tile sparse kernel" in line]
    assert sparse and layout["convs"] > 0
    assert layout["convs"] + len(layout["kept_nchw"]) == compiled.conv_count
    # the sparse convs' input is reordered to NCHW and their output back into the layout
    # (by the op that needs it, e.g. the residual add): the cost is in the model
    assert layout["to_nchw"].get("conv2d", 0) >= 1 and sum(layout["to_layout"].values()) >= 1
    densities = [float(line.split("density ")[1].split()[0]) for line in sparse]
    assert max(densities) < 0.35
    # all dense: no conv kept NCHW for its weight
    everything = compile_model(imported, MixedCSRConv(dense_above=0.0), host_target(),
                               tmp_path / "dense")
    assert not any("pixel-tile" in line for line in everything.layout["kept_nchw"])


def test_a_dense_conv_between_sparse_ones_stays_nchw(tmp_path: Path) -> None:
    """MobileNetV2 pruned in its 1x1 convs alone (Elsen et al.'s recipe): `mixed_csr`
    keeps the sparse 1x1 convs NCHW, and each dense depthwise conv between two of them
    is computed by `direct` in NCHW too (the layout pass sees its neighbours), so the
    blocks run without reorders; the model still computes what PyTorch does."""
    model = make_permanent(PRUNINGS["pointwise"](copy.deepcopy(_model("mobilenetv2")))).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = model(x).numpy()
    imported = import_torch_model(model, (1, 3, 32, 32))
    compiled = compile_model(imported, MixedCSRConv(), host_target(), tmp_path)
    layout = compiled.layout
    between = [line for line in layout["kept_nchw"] if "between convs kept in NCHW" in line]
    sparse = [line for line in layout["kept_nchw"] if "pixel-tile sparse kernel" in line]
    assert len(between) >= 10 and all("direct in NCHW" in line for line in between)
    # a reorder pair around each dense depthwise conv, as before, would be 2 per conv
    reorders = sum(layout["to_nchw"].values()) + sum(layout["to_layout"].values())
    assert reorders < len(between)
    assert len(sparse) >= len(between)
    got = run_batch(load_vm(compiled.executable_path), x.numpy())
    check = verify_outputs(got, ref)
    assert check.passed, check.explain()


@pytest.mark.parametrize(("bits", "registers", "datapath"),
                         [(512, 32, None), (256, 16, None), (128, 16, None), (512, 32, 256)])
def test_mixed_crossover_follows_the_fma_width(bits: int, registers: int,
                                               datapath: int | None) -> None:
    """The density from which a conv is computed dense is the FMA units' width's
    (narrower units favour the sparse kernel: measured 0.35 with Cascade Lake's AVX-512,
    0.55 with AVX2 and with Zen 4's AVX-512 on 256-bit units; 128-bit takes the nearest),
    whichever CPU runs the test; a set `dense_above` wins."""
    spec = ConvSpec(data_shape=(1, 64, 16, 16), weight_shape=(64, 64, 3, 3), strides=(1, 1),
                    padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, data_dtype="float32",
                    weight_dtype="float32", out_dtype="float32")
    weight = np.zeros(spec.weight_shape, dtype="float32")
    weight.reshape(-1)[: int(0.45 * weight.size)] = 1.0  # density 0.45: between the two
    full = bits == 512 and datapath is None
    expected = DENSE_ABOVE_BY_BITS[512 if full else 256]
    with forced_simd(bits, registers, datapath):
        assert default_dense_above() == expected
        reason = MixedCSRConv().keeps_nchw(spec, weight)
        assert (reason is not None) == (not full)  # sparse (kept NCHW) below 512 bits
        if reason is not None:
            assert f"< {expected:g}" in reason
        assert MixedCSRConv(dense_above=0.4).keeps_nchw(spec, weight) is None
        assert MixedCSRConv(dense_above=0.5).keeps_nchw(spec, weight) is not None
        # thin convs (1x1, depthwise) have their own crossover: 0.85 on 256-bit units
        thin = DENSE_ABOVE_THIN_BY_BITS[512 if full else 256]
        for conv in (replace(spec, weight_shape=(64, 64, 1, 1), padding=(0, 0, 0, 0)),
                     replace(spec, weight_shape=(64, 1, 3, 3), groups=64)):
            assert default_dense_above(conv) == thin
            dense_ish = np.zeros(conv.weight_shape, dtype="float32")
            dense_ish.reshape(-1)[: int(0.7 * dense_ish.size)] = 1.0
            assert (MixedCSRConv().keeps_nchw(conv, dense_ish) is not None) == (not full)
            assert MixedCSRConv(dense_above=0.6).keeps_nchw(conv, dense_ish) is None
