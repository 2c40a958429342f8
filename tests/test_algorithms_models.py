"""Whole models compiled with every algorithm give PyTorch's outputs and top-1.

CIFAR ResNet18 and MobileNetV2 (half width, random weights) cover every conv kind the
CIFAR models have, including depthwise convs where spatial pack falls back to direct.
CSR variants get the model pruned to 90% (global L1), so rows of every length occur.
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
from dlas.measure.timing import load_vm, run_batch
from dlas.measure.verify import verify_outputs
from dlas.targets.host import host_target

ALGORITHMS = ["direct", "gemm", "spatial_pack", "direct_csr", "gemm_csr", "spatial_pack_csr"]

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


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_model_matches_pytorch(model_pair: tuple, algorithm: str, tmp_path: Path) -> None:
    name, dense, sparse = model_pair
    model = sparse if algorithm.endswith("_csr") else dense
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    imported = import_torch_model(model, (1, 3, 32, 32))
    compiled = compile_model(imported, registry.create("algorithms", algorithm, {}),
                             host_target(), tmp_path)
    got = run_batch(load_vm(compiled.executable_path), x.numpy())
    check = verify_outputs(got, ref)
    assert check.passed, check.explain()
    assert check.top1_agreement == 1.0
    assert np.array_equal(got.argmax(1), ref.argmax(1))
    # Only spatial pack falls back, only on depthwise convs, and says so per conv.
    if algorithm.startswith("spatial_pack") and name == "mobilenetv2":
        assert compiled.fallbacks
        fallback = "direct_csr" if algorithm.endswith("_csr") else "direct"
        assert all(f"computed with {fallback}" in line for line in compiled.fallbacks)
    else:
        assert compiled.fallbacks == []
