"""Kernel objects kept per workspace (`dlas.compiler.kernel_objects`): a second weight set
of one model links the first compile's kernels, in this process or another; the key
follows the kernels, not the weights; a damaged object is rebuilt; every library is
verified against PyTorch."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.codegen_config import CPU_CODEGEN_CONFIG, cpu_codegen_context
from dlas.compiler.kernel_objects import _PLACEHOLDER, KernelObjects, kernel_key
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.compression.pruning import make_permanent, prune_weights_global_l1
from dlas.integrity import seal_path, write_seal
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.targets.host import host_target

SHAPE = (1, 3, 16, 16)
REPO = Path(__file__).resolve().parents[1]


def _models() -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    dense = registry.create("models", "tiny_cnn", {}, num_classes=10,
                            input_shape=SHAPE[1:]).eval()
    pruned = make_permanent(prune_weights_global_l1(copy.deepcopy(dense), 0.8)).eval()
    sparser = make_permanent(prune_weights_global_l1(copy.deepcopy(dense), 0.9)).eval()
    return dense, pruned, sparser


@pytest.fixture(scope="module")
def models() -> tuple[tuple[torch.nn.Module, ImportedModel], ...]:
    return tuple((m, import_torch_model(m, SHAPE)) for m in _models())


def _verified(model: torch.nn.Module, library: Path) -> None:
    x = torch.randn(4, *SHAPE[1:], generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(x).numpy()
    check = verify_outputs(run_batch(load_vm(library), x.numpy()), ref)
    assert check.passed, check.explain()


def test_a_second_weight_set_links_the_first_compiles_kernels(models, tmp_path: Path) -> None:
    (dense, imp_dense), (pruned, imp_pruned), _ = models
    kept = KernelObjects(tmp_path / "kernels")
    direct = registry.create("algorithms", "direct", {})
    first = compile_model(imp_dense, direct, host_target(), tmp_path / "a", kernels=kept)
    second = compile_model(imp_pruned, direct, host_target(), tmp_path / "b", kernels=kept)
    assert first.kernel_key and first.kernel_key == second.kernel_key
    assert (first.kernels_reused, second.kernels_reused) == (False, True)
    assert sorted(p.name for p in kept.root.iterdir()) == [f"{first.kernel_key}.o",
                                                           f"{first.kernel_key}.o.sha256"]
    _verified(dense, first.executable_path)
    _verified(pruned, second.executable_path)
    # the placeholder's object was swapped for the kept kernels'
    library = second.executable_path.read_bytes()
    assert _PLACEHOLDER.encode() not in library
    assert b"dlas_direct_conv2d" in library
    # without a folder nothing is kept, and the library is the same function
    alone = compile_model(imp_pruned, direct, host_target(), tmp_path / "c")
    assert alone.kernel_key is None and not alone.kernels_reused
    _verified(pruned, alone.executable_path)


def test_the_key_follows_the_kernels_not_the_weights(models, tmp_path: Path) -> None:
    """CSR kernels are shaped by their sparsity, dense ones by the model: each library
    computes its own model's function whatever was kept before it."""
    (dense, imp_dense), (pruned, imp_pruned), (sparser, imp_sparser) = models
    kept = KernelObjects(tmp_path / "kernels")
    keys = {}
    for name in ("direct_csr", "gemm"):
        algorithm = registry.create("algorithms", name, {})
        for tag, model, imp in (("80", pruned, imp_pruned), ("90", sparser, imp_sparser)):
            result = compile_model(imp, algorithm, host_target(), tmp_path / f"{name}{tag}",
                                   kernels=kept)
            _verified(model, result.executable_path)
            keys[name, tag] = result.kernel_key
    assert keys["gemm", "80"] == keys["gemm", "90"]
    assert keys["gemm", "80"] != keys["direct_csr", "80"]
    direct = compile_model(imp_dense, registry.create("algorithms", "direct", {}),
                           host_target(), tmp_path / "direct", kernels=kept)
    assert direct.kernel_key not in keys.values() and not direct.kernels_reused


def test_the_key_names_the_target_and_the_pass_config() -> None:
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def add_one(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")) -> None:
        for i in range(8):
            b[i] = a[i] + T.float32(1)

    mod = tvm.IRModule({"add_one": add_one})
    zen4 = tvm.target.Target({"kind": "llvm", "mcpu": "znver4"})
    zen3 = tvm.target.Target({"kind": "llvm", "mcpu": "znver3"})
    plain = cpu_codegen_context(None)
    assert kernel_key(mod, zen4, plain) == kernel_key(mod, zen4, cpu_codegen_context(None))
    assert kernel_key(mod, zen4, plain) != kernel_key(mod, zen3, plain)
    assert kernel_key(mod, zen4, plain) != kernel_key(
        mod, zen4, cpu_codegen_context({"tirx.noalias": False}))
    assert kernel_key(mod, zen4, plain) != kernel_key(
        mod, zen4, tvm.transform.PassContext(opt_level=2, config=CPU_CODEGEN_CONFIG))


def test_another_process_finds_the_kept_kernels(models, tmp_path: Path) -> None:
    """Compile helpers are other processes: the key must not depend on this one."""
    _, (pruned, imp_pruned), _ = models
    script = (
        "import copy, sys, torch\n"
        "import tests.plugins.tiny_cnn\n"
        "from dlas import registry\n"
        "from dlas.compiler.build import compile_model\n"
        "from dlas.compiler.kernel_objects import KernelObjects\n"
        "from dlas.compiler.relax_import import import_torch_model\n"
        "from dlas.targets.host import host_target\n"
        "torch.manual_seed(5)\n"
        "m = registry.create('models', 'tiny_cnn', {}, num_classes=10,"
        " input_shape=(3, 16, 16)).eval()\n"
        "r = compile_model(import_torch_model(m, (1, 3, 16, 16)),"
        " registry.create('algorithms', 'spatial_pack', {}), host_target(),"
        " sys.argv[1], kernels=KernelObjects(sys.argv[2]))\n"
        "print(r.kernel_key)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "other"),
                           str(tmp_path / "kernels")], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    here = compile_model(imp_pruned, registry.create("algorithms", "spatial_pack", {}),
                         host_target(), tmp_path / "here",
                         kernels=KernelObjects(tmp_path / "kernels"))
    assert here.kernels_reused and here.kernel_key == done.stdout.strip().splitlines()[-1]
    _verified(pruned, here.executable_path)


@pytest.mark.parametrize("damage", ["truncated", "sealed_garbage", "unsealed",
                                    "killed_before_the_object_moved"])
def test_a_damaged_kept_object_is_built_again(models, tmp_path: Path, damage: str) -> None:
    """An object that differs from its seal (or has none) is not linked; one sealed but
    refused by the linker is discarded at the link; a keep killed after writing the seal
    and before moving the object in leaves a seal and a hidden temporary file. Either way
    the kernels are built, kept again whole, and the library computes the model."""
    (dense, imp_dense), (pruned, imp_pruned), _ = models
    kept = KernelObjects(tmp_path / "kernels")
    direct = registry.create("algorithms", "direct", {})
    first = compile_model(imp_dense, direct, host_target(), tmp_path / "a", kernels=kept)
    obj = kept.path(first.kernel_key)
    whole = obj.read_bytes()
    if damage == "truncated":
        obj.write_bytes(whole[:200])
    elif damage == "sealed_garbage":
        obj.write_bytes(b"not an object" * 20)
        write_seal(obj)
    elif damage == "unsealed":
        seal_path(obj).unlink()
    else:
        obj.rename(obj.with_name(f".{obj.name}.abc.tmp"))
    assert (kept.find(first.kernel_key) is None) == (damage != "sealed_garbage")
    again = compile_model(imp_pruned, direct, host_target(), tmp_path / "b", kernels=kept)
    assert not again.kernels_reused and again.kernel_key == first.kernel_key
    assert obj.read_bytes() == whole and kept.find(first.kernel_key) == obj
    _verified(pruned, again.executable_path)
    assert np.isfinite(run_batch(load_vm(again.executable_path),
                                 np.zeros(SHAPE, dtype="float32"))).all()
