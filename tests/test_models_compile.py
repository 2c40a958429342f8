"""The models added beside ResNet18/MobileNetV2 compile with TVM and compute PyTorch's function.

CIFAR MobileNetV1 and VGG-16 at quarter width; the four torchvision ImageNet models with
random weights at 64x64 input (they are fully convolutional with adaptive pooling, so a
small image exercises every layer kind: SiLU and squeeze-excitation in EfficientNet,
dense concatenation in DenseNet) to keep CI time down.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dlas import registry
from dlas.algorithms.direct import DirectConv
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import import_torch_model
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.targets.host import host_target

pytestmark = pytest.mark.slow

CASES = [
    ("mobilenetv1", {"width_multiplier": 0.25}, 10, (3, 32, 32)),
    ("vgg16", {"width_multiplier": 0.25}, 10, (3, 32, 32)),
    ("resnet50", {}, 1000, (3, 64, 64)),
    ("densenet161", {}, 1000, (3, 64, 64)),
    ("efficientnet_b0", {}, 1000, (3, 64, 64)),
    ("mobilenetv2_imagenet", {}, 1000, (3, 64, 64)),
]


@pytest.mark.parametrize("name,params,classes,shape", CASES, ids=[c[0] for c in CASES])
def test_model_compiles_and_matches_pytorch(name: str, params: dict, classes: int,
                                            shape: tuple[int, ...], tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = registry.create("models", name, params, num_classes=classes,
                            input_shape=shape).eval()
    x = torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    compiled = compile_model(import_torch_model(model, (1, *shape)), DirectConv(),
                             host_target(), tmp_path)
    check = verify_outputs(run_batch(load_vm(compiled.executable_path), x.numpy()), ref)
    assert check.passed, check.explain()
    assert compiled.fallbacks == []
