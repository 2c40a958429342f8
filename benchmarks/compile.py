"""Where a compile's time goes, per phase, for the paper's eight models and each algorithm.

CIFAR models (ResNet18, MobileNetV1, MobileNetV2, VGG-16) at 32x32 and `--width`
(default: full width), ImageNet ones (ResNet50, DenseNet161, EfficientNet-B0,
MobileNetV2) at 224x224; random weights (compile time does not depend on their values).
Dense algorithms compile the model as is; CSR algorithms (`--csr`) compile it pruned to
`--sparsity` (global L1 over conv weights, as the weight_pruning option does).

Phases (seconds): import (torch.export + Relax frontend, once per model, shared by its
variants), lower (bind, decompose, legalize with the algorithm, fuse), fold (constant
folding), schedule (minimal schedules), codegen (TIR to LLVM IR), export (LLVM machine
code and the link). `total` is one variant's compile without import; `floor` is the share
of codegen + export, LLVM's own work, which only less code lowers.

The previous path (TVM's FoldConstant, a kernel build per constant) is compiled beside
the current one for `--peer` models, right after it in the same run, so the two see the
same machine load; `--peer-asserts` does the same for the codegen before
`dlas.compiler.codegen_config` (TVM's per-argument assertions kept in every kernel).
`--layouts` compiles each dense algorithm in each activation layout (NCHW, NHWC, NCHWc).
Every compiled variant is run once and checked against PyTorch
(`--no-verify` to skip).

    python benchmarks/compile.py                                   # everything (long)
    python benchmarks/compile.py --models mobilenetv2 resnet18 --algorithms direct \\
        --csr gemm_csr --peer mobilenetv2                            # a quick subset
    python benchmarks/compile.py --models resnet18 mobilenetv2 --width 0.5 --csr \\
        --peer --layouts NCHW NCHWc --peer-asserts                   # layouts, asserts
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
import tvm

from dlas import registry
from dlas.compiler import build
from dlas.compiler.build import PHASES, compile_model
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.compression.pruning import make_permanent, prune_weights_global_l1
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch, set_num_threads
from dlas.targets.host import detect_host_cpu, host_target

CIFAR = ["resnet18", "mobilenetv1", "mobilenetv2", "vgg16"]
IMAGENET = ["resnet50", "densenet161", "efficientnet_b0", "mobilenetv2_imagenet"]
DENSE = ["direct", "gemm", "spatial_pack"]
CSR = ["direct_csr", "gemm_csr", "spatial_pack_csr"]
#: Phases of a variant's compile as printed (tune never runs here, nor a GPU's device check).
SHOWN = [p for p in PHASES if p not in ("tune", "device_check")]


def build_model(name: str, width: float) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """The model with seeded random weights, and its input shape (batch 1)."""
    torch.manual_seed(0)
    if name in IMAGENET:
        shape = (3, 224, 224)
        model = registry.create("models", name, {}, num_classes=1000, input_shape=shape)
    else:
        shape = (3, 32, 32)
        model = registry.create("models", name, {"width_multiplier": width}, num_classes=10,
                                input_shape=shape)
    return model.eval(), (1, *shape)


@contextmanager
def with_asserts(keep: bool) -> Iterator[None]:
    """Inside, when `keep`: the codegen before `dlas.compiler.codegen_config`, TVM's
    per-argument assertions kept in every kernel (the `--peer-asserts` peer)."""
    if not keep:
        yield
        return
    saved = build.cpu_codegen_context
    build.cpu_codegen_context = lambda: tvm.transform.PassContext(opt_level=3)
    try:
        yield
    finally:
        build.cpu_codegen_context = saved


def compile_variant(imported: ImportedModel, algorithm: str, layout: str, target: dict,
                    mode: str, x: np.ndarray | None, ref: np.ndarray | None
                    ) -> dict[str, Any]:
    """One compile's phases (and the check of its output when `x` is given). `mode`:
    "numpy" (the current path), "tvm" (TVM's FoldConstant) or "asserts" (TVM's argument
    checks kept)."""
    algo = registry.create("algorithms", algorithm,
                           {} if layout == "NCHW" else {"layout": layout})
    fold = "tvm" if mode == "tvm" else "numpy"
    with tempfile.TemporaryDirectory() as tmp, with_asserts(mode == "asserts"):
        result = compile_model(imported, algo, target, Path(tmp), fold=fold)
        verified = None
        if x is not None:
            check = verify_outputs(run_batch(load_vm(result.executable_path), x), ref)
            if not check.passed:
                raise SystemExit(f"{algorithm} {layout} ({mode}): {check.explain()}")
            verified = check.max_abs_diff
    return {"phases": result.phases, "total": result.compile_seconds,
            "fallbacks": len(result.fallbacks), "max_abs_diff": verified,
            "left_to_tvm": sum(result.folded.get("left_to_tvm", {}).values())}


def row(model: str, label: str, fold: str, import_s: float | None, rec: dict[str, Any]) -> str:
    phases = rec["phases"]
    floor = (phases.get("codegen", 0.0) + phases.get("export", 0.0)) / rec["total"]
    cells = " ".join(f"{phases.get(p, 0.0):>8.2f}" for p in SHOWN)
    imp = f"{import_s:>7.1f}" if import_s is not None else f"{'':>7}"
    return (f"{model:<21} {label:<21} {fold:<13} {imp} {cells} {rec['total']:>7.2f} "
            f"{floor:>6.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=CIFAR + IMAGENET,
                        choices=CIFAR + IMAGENET)
    parser.add_argument("--algorithms", nargs="*", default=DENSE, choices=DENSE)
    parser.add_argument("--csr", nargs="*", default=CSR, choices=CSR,
                        help="CSR algorithms, on the model pruned to --sparsity")
    parser.add_argument("--sparsity", type=float, default=0.8)
    parser.add_argument("--width", type=float, default=1.0, help="CIFAR models' width")
    parser.add_argument("--peer", nargs="*", default=["mobilenetv2", "resnet18"],
                        help="models also compiled with TVM's FoldConstant (previous path)")
    parser.add_argument("--peer-algorithms", nargs="*", default=["direct"],
                        help="the algorithms compiled with the previous path too")
    parser.add_argument("--layouts", nargs="+", default=["NCHW"],
                        choices=["NCHW", "NHWC", "NCHWc"],
                        help="activation layouts of the dense algorithms")
    parser.add_argument("--peer-asserts", action="store_true",
                        help="also compile every variant with TVM's argument checks kept")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every record here")
    args = parser.parse_args()

    registry.load_plugins()
    torch.set_num_threads(args.threads)
    set_num_threads(args.threads)
    target = host_target(args.threads)
    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), {cpu.get('cores')} cores; "
          f"target {json.dumps(target)}; seconds per phase; CSR at {args.sparsity:.0%} "
          f"sparsity; floor = (codegen + export) / total")
    print(f"{'model':<21} {'algorithm':<21} {'path':<13} {'import':>7} "
          + " ".join(f"{p:>8}" for p in SHOWN) + f" {'total':>7} {'floor':>6}")
    records: list[dict[str, Any]] = []
    for name in args.models:
        model, shape = build_model(name, args.width)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        variants: list[tuple[torch.nn.Module, list[str]]] = []
        if args.algorithms:
            variants.append((model, args.algorithms))
        if args.csr:
            pruned = make_permanent(prune_weights_global_l1(copy.deepcopy(model),
                                                            args.sparsity))
            variants.append((pruned, args.csr))
        for net, algorithms in variants:
            start = time.perf_counter()
            imported = import_torch_model(net, shape)
            import_s = time.perf_counter() - start
            shown_import: float | None = import_s  # printed once per imported model
            ref = None
            if not args.no_verify:
                with torch.no_grad():
                    ref = net(torch.from_numpy(x)).numpy()
            for algorithm in algorithms:
                modes = ["numpy"]
                if name in args.peer and algorithm in args.peer_algorithms:
                    modes.append("tvm")
                if args.peer_asserts:
                    modes.append("asserts")
                for layout in args.layouts if algorithm in DENSE else ["NCHW"]:
                    for mode in modes:
                        rec = compile_variant(imported, algorithm, layout, target, mode,
                                              None if args.no_verify else x, ref)
                        label = algorithm if algorithm in DENSE else \
                            f"{algorithm} {args.sparsity:.0%}"
                        label += "" if layout == "NCHW" else f" {layout}"
                        shown = {"numpy": "numpy", "tvm": "tvm(prev)",
                                 "asserts": "asserts(prev)"}[mode]
                        print(row(name, label, shown, shown_import, rec), flush=True)
                        shown_import = None
                        records.append({"model": name, "algorithm": algorithm,
                                        "layout": layout, "mode": mode,
                                        "width": args.width if name in CIFAR else None,
                                        "import": import_s, **rec})
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu.get("model"), "records": records},
                                        indent=1))


if __name__ == "__main__":
    main()
