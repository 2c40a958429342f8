"""Exact constant folding in numpy (`dlas.compiler.fold`): outputs unchanged, for float32,
float16 and int8 models, and every op it folds computes TVM's own kernel's bits.

The model is test_compile's SmallNet: conv + batch-norm + ReLU, a depthwise conv with
batch-norm, a 1x1 conv with bias, a residual add and a linear head. Compiled three ways:
folded in numpy (the default), by TVM's FoldConstant (the previous path) and not at all
(every constant recomputed at run time).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import ir, relax

from dlas.algorithms.base import ConvAlgorithm
from dlas.algorithms.direct import DirectConv
from dlas.algorithms.gemm import GemmCSRConv
from dlas.algorithms.spatial_pack import SpatialPackConv
from dlas.algorithms.spatial_pack.compute import KERNEL_VEC
from dlas.compiler.build import PHASES, CompileResult, compile_model, lower_to_tir, make_target
from dlas.compiler.fold import EVALUATORS, fold_constants
from dlas.compiler.precision import convert_float16
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from tests.test_compile import INPUT_SHAPE, make_model, torch_out

TARGET = {"kind": "llvm"}


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return make_model()


@pytest.fixture(scope="module")
def imported(model: nn.Module) -> ImportedModel:
    # batch norms kept (not folded into the convs at import) so their decomposition gives
    # the numpy folder the constant chains it exists for
    return import_torch_model(model, INPUT_SHAPE, fold_batchnorm=False)


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((4, *INPUT_SHAPE[1:])).astype(np.float32)


def compiled(imp: ImportedModel, algorithm: ConvAlgorithm, out: Path, fold: str,
             x: np.ndarray) -> tuple[np.ndarray, CompileResult]:
    result = compile_model(imp, algorithm, TARGET, out / fold, fold=fold)
    return run_batch(load_vm(result.executable_path), x), result


def bound(imp: ImportedModel) -> tvm.IRModule:
    """What `lower_to_tir` folds: parameters bound, batch-norm decomposed."""
    mod = relax.transform.BindParams("main", imp.params)(imp.mod)
    return relax.transform.DecomposeOpsForInference()(mod)


def constant_calls(mod: tvm.IRModule) -> list[str]:
    """Ops of calls whose arguments are all literal constants. Every constant chain starts
    with one, so a folded module has none."""
    found: list[str] = []

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and isinstance(expr.op, ir.Op) and expr.args and all(
                isinstance(a, ir.GenericConst | relax.ShapeExpr) for a in expr.args):
            found.append(expr.op.name)

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def test_every_constant_subexpression_is_folded_in_numpy(imported: ImportedModel) -> None:
    mod = bound(imported)
    assert "relax.expand_dims" in constant_calls(mod)  # the decomposed batch-norm's
    folded, report = fold_constants(mod)
    # two batch-norms (4 expand_dims, var + eps, sqrt each), the 1x1 conv's bias reshape,
    # the linear weight's transpose
    assert dict(report.numpy) == {"relax.expand_dims": 8, "relax.add": 2, "relax.sqrt": 2,
                                  "relax.reshape": 1, "relax.permute_dims": 1}
    assert not report.left_to_tvm
    assert constant_calls(folded) == []


def test_folding_leaves_outputs_unchanged(imported: ImportedModel, model: nn.Module,
                                          x: np.ndarray, tmp_path: Path) -> None:
    numpy_out, result = compiled(imported, DirectConv(), tmp_path, "numpy", x)
    tvm_out, tvm_result = compiled(imported, DirectConv(), tmp_path, "tvm", x)
    none_out, _ = compiled(imported, DirectConv(), tmp_path, "none", x)
    # the same constants as TVM's kernels computed, hence the same kernels and bits
    np.testing.assert_array_equal(numpy_out, tvm_out)
    # constants recomputed at run time (in fused kernels, where LLVM may contract)
    np.testing.assert_allclose(numpy_out, none_out, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(numpy_out, torch_out(model, x), rtol=1e-4, atol=1e-4)
    assert verify_outputs(numpy_out, torch_out(model, x)).passed
    assert result.fallbacks == tvm_result.fallbacks == []
    assert list(result.phases) == [p for p in PHASES if p not in ("tune", "device_check")]
    assert all(s >= 0 for s in result.phases.values())
    assert sum(result.phases.values()) <= result.compile_seconds
    assert result.folded["numpy"]["relax.sqrt"] == 2 and result.folded["left_to_tvm"] == {}
    assert tvm_result.folded == {"numpy": {}, "left_to_tvm": {}}


class ScaledWeightNet(nn.Module):
    """Its conv weights are constant expressions (weight * scale), not bound parameters."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        weight = torch.randn(16, 3, 3, 3)
        weight[weight.abs() < 1.0] = 0.0  # pruned: CSR has zeros to skip
        self.weight = nn.Parameter(weight)
        self.scale = nn.Parameter(torch.rand(16, 1, 1, 1) + 0.5)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(nn.functional.conv2d(x, self.weight * self.scale, padding=1))
        return self.head(y.mean(dim=(2, 3)))


def test_packed_and_csr_weights_come_from_the_final_constants(
        x: np.ndarray, tmp_path: Path) -> None:
    net = ScaledWeightNet().eval()
    imp = import_torch_model(net, INPUT_SHAPE, fold_batchnorm=False)
    ref = torch_out(net, x)
    for algorithm in (SpatialPackConv(), GemmCSRConv()):
        out, result = compiled(imp, algorithm, tmp_path / algorithm.name, "numpy", x)
        assert result.fallbacks == []  # the folded weight reached weight_constants
        assert result.folded["numpy"] == {"relax.multiply": 1, "relax.permute_dims": 1}
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    # TVM's fold came after legalization, so the algorithms never saw the weight's value:
    # spatial pack packed it at run time, CSR fell back
    target = make_target(TARGET)
    for fold, packs_at_run_time in (("numpy", False), ("tvm", True)):
        mod, _ = lower_to_tir(imp.mod, imp.params, SpatialPackConv(), target, fold=fold)
        assert (f'"{KERNEL_VEC}"' in mod.script()) == packs_at_run_time
    _, before = compiled(imp, GemmCSRConv(), tmp_path / "csr", "tvm", x)
    assert len(before.fallbacks) == 1 and "not a compile-time constant" in before.fallbacks[0]


def test_float16_folding_is_exact(imported: ImportedModel, model: nn.Module, x: np.ndarray,
                                  tmp_path: Path) -> None:
    half = convert_float16(imported)
    folded, report = fold_constants(bound(half))
    assert report.numpy["relax.astype"] > 0 and not report.left_to_tvm  # float32 buffers
    assert constant_calls(folded) == []
    numpy_out, result = compiled(half, DirectConv(), tmp_path, "numpy", x)
    tvm_out, _ = compiled(half, DirectConv(), tmp_path, "tvm", x)
    np.testing.assert_array_equal(numpy_out, tvm_out)
    assert result.fallbacks == []
    assert verify_outputs(numpy_out, torch_out(model, x), "float16").passed


def test_int8_folding_is_exact(model: nn.Module, x: np.ndarray, tmp_path: Path) -> None:
    from dlas.compiler.quantized import conv_dtypes, import_qdq_onnx, output_step
    from dlas.compression.int8 import export_onnx, literal_qdq, quantize_qdq

    qdq = quantize_qdq(export_onnx(model, INPUT_SHAPE[1:]), global_scale=8.0)
    imp, _ = import_qdq_onnx(qdq, INPUT_SHAPE)
    assert ("int8", "int8", "int32") in conv_dtypes(imp.mod)
    _, report = fold_constants(bound(imp))
    assert report.numpy["relax.dequantize"] > 0 and not report.left_to_tvm  # int32 biases
    numpy_out, result = compiled(imp, DirectConv(), tmp_path, "numpy", x)
    tvm_out, _ = compiled(imp, DirectConv(), tmp_path, "tvm", x)
    np.testing.assert_array_equal(numpy_out, tvm_out)
    assert result.fallbacks == []
    check = verify_outputs(numpy_out, literal_qdq(qdq)(x), "int8", "qdq",
                           output_step=output_step(qdq))
    assert check.passed, check.explain()


def _op_cases() -> list[tuple[str, relax.Expr]]:
    """One call per folded op and dtype, on values that probe rounding: random ones,
    float16 halfway points, out-of-range casts, negative square roots (nan)."""
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((2, 3, 4)).astype(np.float32) * 3
    g32 = rng.standard_normal((2, 3, 4)).astype(np.float32) + 0.1
    f16, g16 = f32.astype(np.float16), g32.astype(np.float16)
    halfway = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 70000.0, -1e-8, 6e-8, 0.0],
                       np.float32)
    c = relax.const
    cases: list[tuple[str, relax.Expr]] = []
    for a, b in ((f32, g32), (f16, g16)):
        for op in (relax.op.add, relax.op.subtract, relax.op.multiply, relax.op.divide):
            cases.append((f"{op.__name__} {a.dtype}", op(c(a), c(b))))
        cases.append((f"sqrt {a.dtype}", relax.op.sqrt(c(a))))
        cases.append((f"negative {a.dtype}", relax.op.negative(c(a))))
        cases.append((f"broadcast add {a.dtype}", relax.op.add(c(a), c(b[:1, :, :1]))))
    ints = rng.integers(-2**31, 2**31 - 1, size=(3, 4), dtype=np.int64).astype(np.int32)
    cases += [
        ("astype f32->f16", relax.op.astype(c(halfway), "float16")),
        ("astype f16->f32", relax.op.astype(c(f16), "float32")),
        ("astype i32->f32", relax.op.astype(c(ints), "float32")),
        ("add int32 (wraps)", relax.op.add(c(ints), c(ints))),
        ("expand_dims", relax.op.expand_dims(c(f32), axis=[0, 3])),
        ("squeeze", relax.op.squeeze(c(f32[:1]), axis=[0])),
        ("reshape", relax.op.reshape(c(f32), (6, 4))),
        ("flatten", relax.op.flatten(c(f32))),
        ("permute_dims", relax.op.permute_dims(c(f32), axes=[2, 0, 1])),
        ("permute_dims reversed", relax.op.permute_dims(c(f32))),
        ("broadcast_to", relax.op.broadcast_to(c(f32[:, :1]), (2, 3, 4))),
    ]
    q8 = rng.integers(-128, 128, size=(4, 3), dtype=np.int64).astype(np.int8)
    scale = (rng.random(4) * 0.1).astype(np.float32)
    for out_dtype in ("float32", "float16"):
        cases.append((f"dequantize int8 axis 0 -> {out_dtype}", relax.op.dequantize(
            c(q8), c(scale), c(np.zeros(4, np.int8)), axis=0, out_dtype=out_dtype)))
    cases.append(("dequantize int32 per tensor", relax.op.dequantize(
        c(ints), c(np.float32(3e-4)), c(np.int32(0)), axis=0, out_dtype="float32")))
    cases.append(("dequantize int8 zero point", relax.op.dequantize(
        c(q8), c(np.float32(0.05)), c(np.int8(3)), axis=1, out_dtype="float32")))
    return cases


def _returned_constants(mod: tvm.IRModule) -> list[np.ndarray]:
    """The values `main` returns, each of which a fold must have made a constant."""
    func = mod["main"]
    values: dict[relax.Var, relax.Expr] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            values[binding.var] = binding.value

    def resolve(expr: relax.Expr) -> np.ndarray:
        while isinstance(expr, relax.Var):
            expr = values[expr]
        assert isinstance(expr, ir.GenericConst), f"not folded: {expr}"
        return expr.value.numpy()

    body = func.body.body
    while isinstance(body, relax.Var):
        body = values[body]
    return [resolve(field) for field in body.fields]


def test_numpy_evaluators_give_the_bits_of_tvms_kernels() -> None:
    cases = _op_cases()
    assert {expr.op.name for _, expr in cases} == set(EVALUATORS)
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            out = bb.emit_output(relax.Tuple([bb.emit(expr) for _, expr in cases]))
        bb.emit_func_output(out)
    mod = bb.get()
    folded, report = fold_constants(mod)
    assert not report.left_to_tvm and sum(report.numpy.values()) == len(cases)
    with tvm.target.Target("llvm"):  # TVM's way: legalize, then a kernel per constant call
        reference = relax.transform.FoldConstant()(relax.transform.LegalizeOps()(mod))
    for (name, _), ours, theirs in zip(cases, _returned_constants(folded),
                                       _returned_constants(reference), strict=True):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, name
        np.testing.assert_array_equal(ours, theirs, err_msg=name)


def test_ops_numpy_cannot_evaluate_exactly_are_left_to_tvm() -> None:
    c = relax.const(np.linspace(-2, 2, 8, dtype=np.float32))
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            exp = bb.emit(relax.op.exp(c))  # libm and numpy may differ in the last bit
            square = bb.emit(relax.op.multiply(c, c))
            cast = bb.emit(relax.op.astype(square, "int32"))  # float -> int: UB out of range
            out = bb.emit_output(relax.Tuple([exp, cast]))
        bb.emit_func_output(out)
    folded, report = fold_constants(bb.get())
    assert dict(report.numpy) == {"relax.multiply": 1}
    assert dict(report.left_to_tvm) == {"relax.exp": 1, "relax.astype": 1}
    assert sorted(constant_calls(folded)) == ["relax.astype", "relax.exp"]
