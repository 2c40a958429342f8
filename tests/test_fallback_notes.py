"""The console's fallback summary agrees with the per-conv notes under it."""

from __future__ import annotations

import io

import torch
import tvm
from rich.console import Console

from dlas import registry
from dlas.compiler import fallbacks
from dlas.compiler.build import lower_to_tir
from dlas.compiler.relax_import import import_torch_model
from dlas.runner.console import RunConsole


def _printed(row: dict) -> str:
    from dlas.results.row import ResultRow

    buffer = io.StringIO()
    RunConsole(progress=False, console=Console(file=buffer, width=400)).point_end(
        ResultRow(point_key="k", **row))
    return buffer.getvalue()


def test_summary_names_what_computes_each_conv() -> None:
    lines = [
        fallbacks.algorithm_fallback(1, "(1,8,8,8) g8", "spatial_pack", "grouped", "direct"),
        fallbacks.default_lowering(2, "conv2d", "dynamic shape"),
        "conv 3 (data, weight, out) = ('float32', 'float32', 'float32'): not int8; "
        "runs in float32",
    ]
    assert [fallbacks.computed_by(line) for line in lines] == [
        "direct", "TVM's default lowering", ""]
    assert fallbacks.summary(lines, "spatial_pack") == (
        "2 conv(s) not computed with spatial_pack (1 with TVM's default lowering, 1 with "
        "direct); 1 conv(s) not in the deployed precision")


def test_console_never_calls_a_fallback_algorithm_tvms_default_lowering() -> None:
    """spatial_pack on a depthwise conv: the real notes of a real lowering, printed."""
    from tests.plugins.tiny_cnn import TinyCNN

    torch.manual_seed(0)
    imported = import_torch_model(TinyCNN(10).eval(), (1, 3, 8, 8))
    option = registry.get("algorithms", "spatial_pack")
    _, legalizer = lower_to_tir(imported.mod, imported.params, option.fn(option.parse_params({})),
                                tvm.target.Target({"kind": "llvm"}))
    notes = legalizer.fallbacks
    assert notes and all(note.endswith("; computed with direct") for note in notes)

    out = _printed({"status": "failed", "error": "x", "error_stage": "measure",
                    "algorithm": "spatial_pack", "conv_fallbacks": notes})
    assert f"{len(notes)} conv(s) not computed with spatial_pack ({len(notes)} with direct)" \
        in out
    assert "default lowering" not in out
    assert all(line in out for line in fallbacks.by_reason(notes))


def test_notes_that_share_a_reason_are_one_line_naming_their_convs() -> None:
    """A model's depthwise convs under spatial pack: one reason, one console line."""
    lines = [fallbacks.algorithm_fallback(i, f"(1,{c},8,8) g{c} float32", "spatial_pack",
                                          "grouped convs have no packed form", "direct")
             for i, c in [(1, 8), (4, 16), (7, 16)]]
    lines.append(fallbacks.default_lowering(9, "conv2d", "dynamic shape"))
    assert fallbacks.by_reason(lines) == [
        "spatial_pack: grouped convs have no packed form; computed with direct: convs 1, 4, "
        "7 (3)",
        "dynamic shape; default TVM lowering: conv 9 (1)"]
    many = [fallbacks.algorithm_fallback(i, "x", "gemm", "r", "direct") for i in range(8)]
    assert fallbacks.by_reason(many) == [
        "gemm: r; computed with direct: convs 0, 1, 2, 3, 4, 5, ... (8)"]
