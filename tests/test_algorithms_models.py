"""Whole models compiled with every algorithm, in every layout, give PyTorch's outputs
and top-1.

CIFAR ResNet18 and MobileNetV2 (half width, random weights) cover every conv kind the
CIFAR models have, including depthwise convs where spatial pack falls back to direct.
CSR variants get the model pruned to 90% (global L1), so rows of every length occur.
The dense algorithms also run in NHWC and NCHWc, where the layout must hold from the
first conv to the global pool.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import import_torch_model
from dlas.compression.pruning import make_permanent, prune_weights_global_l1
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.targets.host import host_target

ALGORITHMS = ["direct", "gemm", "spatial_pack", "direct_csr", "gemm_csr", "spatial_pack_csr"]
#: (algorithm, layout): every algorithm in NCHW, the dense ones in the vector layouts too.
VARIANTS = [(a, "NCHW") for a in ALGORITHMS] + [
    (a, layout) for a in ("direct", "gemm", "spatial_pack", "direct_csr")
    for layout in ("NHWC", "NCHWc")]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["resnet18", "mobilenetv2"])
def model_pair(request: pytest.FixtureRequest) -> tuple[str, torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = registry.create("models", request.param, {"width_multiplier": 0.5},
                            num_classes=10, input_shape=(3, 32, 32))
    # Batch-norm statistics away from identity, as after training.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    model.eval()
    sparse = make_permanent(prune_weights_global_l1(copy.deepcopy(model), 0.9)).eval()
    return request.param, model, sparse


@pytest.mark.parametrize(("algorithm", "layout"), VARIANTS,
                         ids=[f"{a}-{layout}" for a, layout in VARIANTS])
def test_model_matches_pytorch(model_pair: tuple, algorithm: str, layout: str,
                               tmp_path: Path) -> None:
    name, dense, sparse = model_pair
    model = sparse if algorithm.endswith("_csr") else dense
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    imported = import_torch_model(model, (1, 3, 32, 32))
    params = {} if layout == "NCHW" else {"layout": layout}
    compiled = compile_model(imported, registry.create("algorithms", algorithm, params),
                             host_target(), tmp_path)
    got = run_batch(load_vm(compiled.executable_path), x.numpy())
    check = verify_outputs(got, ref)
    assert check.passed, check.explain()
    assert check.top1_agreement == 1.0
    assert np.array_equal(got.argmax(1), ref.argmax(1))
    # Only dense spatial pack (on depthwise convs) and NCHW direct CSR (on strided convs)
    # fall back, and say so per conv.
    if algorithm == "spatial_pack" and name == "mobilenetv2":
        assert compiled.fallbacks
        assert all("computed with direct" in line for line in compiled.fallbacks)
    elif algorithm == "direct_csr" and layout == "NCHW":
        assert compiled.fallbacks
        assert all("s(2, 2)" in line and "computed with spatial_pack_csr" in line
                   for line in compiled.fallbacks), compiled.fallbacks
    else:
        assert compiled.fallbacks == []
    if layout != "NCHW":  # every conv in the layout, back to NCHW only for the classifier
        assert compiled.layout["convs"] == compiled.conv_count
        assert compiled.layout["to_nchw"] == {"mean": 1}
