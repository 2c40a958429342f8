"""docs/plugins.md cannot rot: its code blocks are run, its claims about models checked.

Every ```python block is executed as a module of its own (so its classes pickle, as the
runner's torch.save needs) and what it registers is exercised, then unregistered; every
```yaml block must be a valid sweep once they are registered; every ```toml block must
declare the entry-point group dlas loads.
"""

from __future__ import annotations

import io
import re
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from dlas import registry
from dlas.compiler.relax_import import import_torch_model
from dlas.sweep.config import parse_config
from dlas.sweep.grid import expand

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[str]:
    found = [code for lang, code in BLOCK.findall(DOC.read_text()) if lang == language]
    assert found, f"no {language} block in {DOC}"
    return found


def _registered() -> set[tuple[str, str]]:
    return {(o.layer, o.name) for o in registry.list_options()}


@pytest.fixture(scope="module")
def snippets() -> Iterator[dict[str, types.ModuleType]]:
    """Run every python block as module `dlas_doc_snippet_<i>`; unregister after."""
    before = _registered()
    modules: dict[str, types.ModuleType] = {}
    try:
        for i, code in enumerate(blocks("python")):
            name = f"dlas_doc_snippet_{i}"
            module = types.ModuleType(name)
            sys.modules[name] = module
            exec(compile(code, f"{DOC}:python block {i + 1}", "exec"), module.__dict__)
            modules[name] = module
        yield modules
    finally:
        for layer, name in _registered() - before:
            registry.unregister(layer, name)
        for name in modules:
            sys.modules.pop(name, None)


def test_snippets_register_what_the_doc_says(snippets: dict[str, types.ModuleType]) -> None:
    names = {name for _, name in _registered()}
    assert {"magnitude_threshold", "small_net"} <= names


def test_model_snippet_honours_the_contract(snippets: dict[str, types.ModuleType]) -> None:
    model = registry.create("models", "small_net", {}, num_classes=10, input_shape=(3, 32, 32))
    assert model.eval()(torch.randn(4, 3, 32, 32)).shape == (4, 10)  # dim 0 is the batch
    buffer = io.BytesIO()
    torch.save(model, buffer)  # what the train stage stores
    buffer.seek(0)
    assert isinstance(torch.load(buffer, weights_only=False), nn.Module)
    assert import_torch_model(model, (1, 3, 32, 32)).input_shape == (1, 3, 32, 32)


def test_compression_snippet_runs(snippets: dict[str, types.ModuleType]) -> None:
    from dlas.compression.base import CompressionResult

    model = registry.create("models", "small_net", {}, num_classes=10, input_shape=(3, 32, 32))
    result = registry.create("compression", "magnitude_threshold", {"threshold": 0.3},
                             model=model, ctx=None)
    assert isinstance(result, CompressionResult) and result.info["zeroed"] > 0
    assert "sparse" in registry.get("compression", "magnitude_threshold").tags


def test_yaml_snippets_are_valid_sweeps(snippets: dict[str, types.ModuleType]) -> None:
    for text in blocks("yaml"):
        points = expand(parse_config(text, source=str(DOC)))
        assert points


def test_toml_snippet_declares_the_entry_point_group() -> None:
    for text in blocks("toml"):
        assert registry.ENTRY_POINT_GROUP in tomllib.loads(text)["project"]["entry-points"]


class _EveryOp(nn.Module):
    """Every module and tensor op the doc says the Relax import and int8 export accept."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=2, dilation=2, bias=False)
        self.bn = nn.BatchNorm2d(c)
        self.dw = nn.Conv2d(c, c, 3, stride=2, padding=1, groups=c)
        self.up = nn.ConvTranspose2d(c, c, 2, stride=2)
        self.conv1d, self.conv3d = nn.Conv1d(c, c, 3, padding=1), nn.Conv3d(c, c, 1)
        self.ln = nn.LayerNorm(c)
        self.acts = nn.Sequential(nn.ReLU(), nn.ReLU6(), nn.Hardtanh(), nn.LeakyReLU(),
                                  nn.PReLU(), nn.SiLU(), nn.GELU(), nn.Hardswish(),
                                  nn.Hardsigmoid(), nn.Sigmoid())
        self.pools = nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(1), nn.Upsample(scale_factor=2))
        self.gap, self.drop = nn.AdaptiveAvgPool2d(1), nn.Dropout(0.1)
        self.fc, self.softmax = nn.Linear(2 * c, 10), nn.Softmax(dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up(self.dw(self.bn(self.conv(x))))
        n, c, h, w = y.shape
        y = y + self.conv1d(y.flatten(2)).view(n, c, h, w)
        y = y * self.conv3d(y.unsqueeze(2)).squeeze(2)
        y = self.pools(self.acts(self.ln(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)))
        z = torch.cat([y, y[:, :, ::2, ::2].mean(dim=(2, 3), keepdim=True).expand_as(y)], 1)
        return self.softmax(self.fc(self.drop(torch.flatten(self.gap(z), 1).reshape(n, -1))))


def test_the_ops_the_doc_lists_import_to_relax_and_export_for_int8() -> None:
    from dlas.compression.int8 import export_onnx

    text = DOC.read_text()
    for claim in ("Conv1d/2d/3d", "LayerNorm", "PReLU", "Hardsigmoid", "upsampling",
                  "`permute`", "Unsupported function types ['erfinv.default']"):
        assert claim in text, claim
    torch.manual_seed(0)
    model = _EveryOp().eval()
    assert import_torch_model(model, (1, 3, 32, 32)).input_shape == (1, 3, 32, 32)
    assert export_onnx(model, (3, 32, 32))


def test_an_unsupported_op_fails_with_the_message_the_doc_quotes() -> None:
    class Erfinv(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.special.erfinv(x.clamp(-0.5, 0.5))

    with pytest.raises(Exception, match=re.escape("Unsupported function types "
                                                  "['erfinv.default']")):
        import_torch_model(Erfinv(), (1, 3, 8, 8))
