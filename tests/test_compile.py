"""Import a small CNN from PyTorch, compile it with `direct` for the host, run and time it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import s_tir, te, tirx

from dlas.algorithms.base import ConvSpec
from dlas.algorithms.direct import DirectConv
from dlas.compiler.build import (
    CompileResult,
    apply_minimal_schedules,
    compile_model,
    lower_to_tir,
    make_target,
)
from dlas.compiler.relax_import import (
    ImportedModel,
    import_torch_model,
    load_imported,
    save_imported,
)
from dlas.measure.vm_timing import load_vm, num_threads_in_use, run_batch, set_num_threads, time_vm
from dlas.targets.host import detect_host_cpu, host_target
from dlas.tir.schedule_helpers import is_parallelized, leaf_blocks, loop_kinds

INPUT_SHAPE = (1, 3, 16, 16)
NUM_CONVS = 5


class SmallNet(nn.Module):
    """conv+bn+relu, depthwise, stride 2, 1x1 with bias, residual add, avgpool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False),
                                nn.BatchNorm2d(8), nn.ReLU())
        self.pw = nn.Conv2d(8, 16, 1)
        self.conv = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.shortcut = nn.Conv2d(8, 16, 1, bias=False)
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dw(self.stem(x))
        y = torch.relu(self.pw(x))
        y = torch.relu(self.conv(y) + self.shortcut(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def make_model() -> nn.Module:
    torch.manual_seed(0)
    model = SmallNet()
    with torch.no_grad():
        for mod in model.modules():  # non-trivial batch-norm statistics
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)
    return model.eval()


def torch_out(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


class NoDepthwise(DirectConv):
    """direct, except depthwise convs, to exercise the recorded fallback."""

    name = "direct_no_dw"

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        if spec.is_depthwise:
            return "depthwise not implemented"
        return super().unsupported_reason(spec)


class PrepackedDirect(DirectConv):
    """direct reading an OHWI copy of the weight made at compile time (the packing path)."""

    name = "direct_prepacked"
    needs_weight_value = True

    def weight_constants(
        self, spec: ConvSpec, weight_value: np.ndarray | None
    ) -> dict[str, np.ndarray] | None:
        assert weight_value is not None and weight_value.shape == spec.weight_shape
        return {"ohwi": np.ascontiguousarray(weight_value.transpose(0, 2, 3, 1))}

    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        packed = weights["ohwi"]
        oihw = te.compute(spec.weight_shape, lambda o, c, y, x: packed[o, y, x, c], "unpack")
        return super().compute(data, {"weight": oihw}, spec)


@pytest.fixture(scope="module")
def model() -> nn.Module:
    return make_model()


@pytest.fixture(scope="module")
def imported(model: nn.Module, tmp_path_factory: pytest.TempPathFactory) -> ImportedModel:
    """Imported, saved and loaded back: everything downstream uses the round-tripped copy."""
    imp = import_torch_model(model, INPUT_SHAPE)
    directory = tmp_path_factory.mktemp("imported")
    save_imported(imp, directory)
    return load_imported(directory)


@pytest.fixture(scope="module")
def compiled(imported: ImportedModel, tmp_path_factory: pytest.TempPathFactory) -> CompileResult:
    set_num_threads(2)
    return compile_model(imported, DirectConv(), host_target(2), tmp_path_factory.mktemp("out"))


def test_batchnorms_after_convs_are_folded_at_import(model: nn.Module) -> None:
    """Conv -> batch norm pairs become one conv with a bias before export (as Relay's
    SimplifyInference + FoldScaleAxis did): same function up to rounding, no batch norm
    left in the module; a conv whose weight a pruning hook computes is left alone."""
    from torch.nn.utils import prune

    from dlas.compiler.relax_import import fold_batchnorms

    bns = sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    folded, count = fold_batchnorms(model)
    assert bns > 0 and count == bns
    assert not any(isinstance(m, nn.BatchNorm2d) for m in folded.modules())
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())  # a copy
    x = torch.randn(INPUT_SHAPE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        np.testing.assert_allclose(folded(x).numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    imp = import_torch_model(model, INPUT_SHAPE)
    assert "batch_norm" not in imp.mod.script()
    assert "batch_norm" in import_torch_model(model, INPUT_SHAPE, fold_batchnorm=False).mod.script()
    hooked = make_model()
    conv = next(m for m in hooked.modules() if isinstance(m, nn.Conv2d))
    prune.l1_unstructured(conv, "weight", amount=0.5)
    assert fold_batchnorms(hooked.eval()) == (hooked, 0)


def test_import_save_load_round_trip(model: nn.Module, tmp_path: Path) -> None:
    imp = import_torch_model(model, INPUT_SHAPE, fold_batchnorm=False)
    assert imp.input_shape == INPUT_SHAPE and imp.input_dtype == "float32"
    # Parameters are function inputs, not constants baked into the module.
    assert set(imp.params) and all(isinstance(v, np.ndarray) for v in imp.params.values())
    assert sum(v.size for v in imp.params.values()) == sum(
        p.numel() for p in model.parameters()
    )
    save_imported(imp, tmp_path)
    back = load_imported(tmp_path)
    tvm.ir.assert_structural_equal(back.mod, imp.mod)
    assert list(back.params) == list(imp.params)
    for name, value in imp.params.items():
        np.testing.assert_array_equal(back.params[name], value)
    assert (back.input_shape, back.input_dtype) == (imp.input_shape, imp.input_dtype)


def test_compiled_matches_pytorch(compiled: CompileResult, model: nn.Module) -> None:
    assert compiled.executable_path.exists()
    assert compiled.conv_count == NUM_CONVS
    assert compiled.fallbacks == []
    assert compiled.schedule_warnings == []
    assert compiled.compile_seconds > 0
    x = np.random.default_rng(0).standard_normal((3, *INPUT_SHAPE[1:])).astype(np.float32)
    out = run_batch(load_vm(compiled.executable_path), x)
    assert out.shape == (3, 10) and out.dtype == np.float32
    np.testing.assert_allclose(out, torch_out(model, x), rtol=1e-4, atol=1e-4)


def test_kernels_carry_no_argument_checks_and_the_model_still_checks_its_input(
        compiled: CompileResult) -> None:
    """Kernels are built without TVM's per-argument assertions (`codegen_config`: 30-45%
    of LLVM's work): their messages ("Mismatched type on argument #...") are not in the
    library. The VM still checks the model's own input at `main`, so a wrong shape or
    dtype is a clear error, not a kernel reading past its buffer."""
    library = compiled.executable_path.read_bytes()
    assert b"on argument #" not in library
    vm = load_vm(compiled.executable_path)
    for bad in (np.zeros((1, 3, 8, 8), np.float32), np.zeros(INPUT_SHAPE, np.float64)):
        with pytest.raises((RuntimeError, ValueError), match="annotation=R.Tensor"):
            run_batch(vm, bad)


def test_executable_loads_in_fresh_process(
    compiled: CompileResult, model: nn.Module, tmp_path: Path
) -> None:
    x = np.random.default_rng(1).standard_normal((2, *INPUT_SHAPE[1:])).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = (
        "import sys, numpy as np\n"
        "from dlas.measure.vm_timing import load_vm, run_batch\n"
        "vm = load_vm(sys.argv[1])\n"
        "np.save(sys.argv[3], run_batch(vm, np.load(sys.argv[2])))\n"
    )
    args = [str(compiled.executable_path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", script, *args], check=True, cwd=root, timeout=120)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), torch_out(model, x),
                               rtol=1e-4, atol=1e-4)


def test_time_vm_returns_repeat_positive_samples(compiled: CompileResult) -> None:
    vm = load_vm(compiled.executable_path)
    x = np.zeros(INPUT_SHAPE, np.float32)
    samples = time_vm(vm, x, repeat=5, warmup=2, num_threads=2)
    assert len(samples) == 5 and all(s > 0 for s in samples)
    assert num_threads_in_use() == 2
    assert len(time_vm(vm, x, repeat=3, number=2)) == 3


@pytest.mark.parametrize("algorithm", [DirectConv(), NoDepthwise()], ids=lambda a: a.name)
def test_every_prim_func_gets_a_parallel_schedule(
    imported: ImportedModel, algorithm: DirectConv
) -> None:
    """Algorithm convs, TVM's fallback conv and all other ops end up thread-parallel."""
    target = make_target(host_target(2))
    mod, legalizer = lower_to_tir(imported.mod, imported.params, algorithm, target)
    # pw and shortcut are the same 1x1 conv on the same input (bias is a separate add),
    # so the block builder deduplicates their PrimFuncs.
    made = NUM_CONVS - 1 - len(legalizer.fallbacks)
    assert len(legalizer.made) == made
    mod, warnings = apply_minimal_schedules(mod, algorithm, target)
    assert warnings == []
    funcs = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    conv_funcs = [name for name in funcs if f"{algorithm.name}_conv2d" in name]
    assert len(conv_funcs) == NUM_CONVS - len(legalizer.fallbacks)
    for name, func in funcs.items():
        assert func.attrs["tirx.is_scheduled"]
        sch = s_tir.Schedule(func)
        for block in leaf_blocks(sch):
            full_reduction = not loop_kinds(sch, block) or loop_kinds(sch, block)[0] != "S"
            assert full_reduction or is_parallelized(sch, block), (name, sch.get(block).name_hint)


def test_fallback_is_recorded_and_hook_sees_unscheduled_module(
    imported: ImportedModel, model: nn.Module, tmp_path: Path
) -> None:
    seen: list[tuple[int, str]] = []

    def hook(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
        scheduled = [
            f for _, f in mod.functions_items()
            if isinstance(f, tirx.PrimFunc) and "tirx.is_scheduled" in f.attrs
        ]
        seen.append((len(scheduled), target.kind.name))
        return mod

    result = compile_model(imported, NoDepthwise(), host_target(2), tmp_path, schedule_hook=hook)
    assert seen == [(0, "llvm")]
    assert result.hook_scheduled == []
    assert len(result.fallbacks) == 1
    assert "depthwise not implemented" in result.fallbacks[0]
    assert result.conv_count == NUM_CONVS
    assert result.schedule_warnings == []
    x = np.random.default_rng(2).standard_normal((2, *INPUT_SHAPE[1:])).astype(np.float32)
    out = run_batch(load_vm(result.executable_path), x)
    np.testing.assert_allclose(out, torch_out(model, x), rtol=1e-4, atol=1e-4)


def test_host_detection() -> None:
    cpu = detect_host_cpu()
    assert cpu["cores"] >= 1 and cpu["arch"] and cpu["mcpu"]
    target = host_target(num_threads=3)
    assert target["kind"] == "llvm" and target["num-cores"] == 3
    assert make_target(target).kind.name == "llvm"


def test_compile_time_weight_constants_reach_the_compute(
    imported: ImportedModel, model: nn.Module, tmp_path: Path
) -> None:
    result = compile_model(imported, PrepackedDirect(), host_target(2), tmp_path)
    assert result.fallbacks == [] and result.conv_count == NUM_CONVS
    x = np.random.default_rng(3).standard_normal((2, *INPUT_SHAPE[1:])).astype(np.float32)
    out = run_batch(load_vm(result.executable_path), x)
    np.testing.assert_allclose(out, torch_out(model, x), rtol=1e-4, atol=1e-4)


def test_unsupported_target_kinds_are_refused(imported: ImportedModel, tmp_path: Path) -> None:
    # llvm (CPUs) and cuda are built (CUDA: tests/test_targets.py); others say what is
    with pytest.raises(NotImplementedError, match="llvm for CPUs, cuda for GPUs"):
        compile_model(imported, DirectConv(), {"kind": "opencl"}, tmp_path)
