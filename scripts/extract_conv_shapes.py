"""Write the deduplicated table of every convolution in the DLAS paper's eight models.

The algorithms' correctness suite (tests/test_algorithms.py) runs each algorithm over this
table. It is generated, not hand-written, so it stays exactly the models' convs:

    python scripts/extract_conv_shapes.py  # -> tests/data/paper_conv_shapes.json
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from dlas._compat import import_torchvision
from dlas.models.cifar import mobilenetv1, mobilenetv2, resnet18, vgg16

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "paper_conv_shapes.json"


def paper_models() -> dict[str, tuple[nn.Module, tuple[int, ...]]]:
    tv = import_torchvision().models
    cifar = (1, 3, 32, 32)
    imagenet = (1, 3, 224, 224)
    return {
        "cifar/resnet18": (resnet18(), cifar),
        "cifar/mobilenetv1": (mobilenetv1(), cifar),
        "cifar/mobilenetv2": (mobilenetv2(), cifar),
        "cifar/vgg16": (vgg16(), cifar),
        "imagenet/resnet50": (tv.resnet50(), imagenet),
        "imagenet/densenet161": (tv.densenet161(), imagenet),
        "imagenet/efficientnet_b0": (tv.efficientnet_b0(), imagenet),
        "imagenet/mobilenetv2": (tv.mobilenet_v2(), imagenet),
    }


def conv_records(model: nn.Module, input_shape: tuple[int, ...]) -> list[dict]:
    """One record per Conv2d call, with the data shape it actually saw."""
    records: list[dict] = []

    def hook(module: nn.Conv2d, inputs: tuple[torch.Tensor, ...], _out: torch.Tensor) -> None:
        if isinstance(module.padding, str):
            raise ValueError(f"string padding {module.padding!r} not in the paper's models")
        ph, pw = module.padding
        records.append({
            "data_shape": list(inputs[0].shape),
            "weight_shape": list(module.weight.shape),
            "strides": list(module.stride),
            "padding": [ph, pw, ph, pw],
            "dilation": list(module.dilation),
            "groups": module.groups,
        })

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model.eval()(torch.zeros(input_shape))
    for handle in handles:
        handle.remove()
    return records


def main() -> None:
    table: dict[str, dict] = {}
    for name, (model, shape) in paper_models().items():
        for record in conv_records(model, shape):
            key = json.dumps(record, sort_keys=True)
            entry = table.setdefault(key, {**record, "models": []})
            if name not in entry["models"]:
                entry["models"].append(name)
    rows = sorted(table.values(), key=lambda r: (r["models"][0], r["data_shape"][2],
                                                   r["weight_shape"]))
    OUT.write_text(json.dumps(rows, indent=0) + "\n")
    print(f"{len(rows)} distinct convs from {len(paper_models())} models -> {OUT}")


if __name__ == "__main__":
    main()
