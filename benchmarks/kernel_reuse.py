"""What linking kept kernels saves: a dense algorithm compiled on a model's pruned weights,
its kernels built (the previous path) against linked from the unpruned model's compile
(`dlas.compiler.kernel_objects`), both in this run, one after the other.

A pruning study compiles each dense algorithm once per weight set: the paper's weight
pruning has 8 levels (50% .. 99%) besides the unpruned model. Every level's kernels are
the unpruned model's, so all but the first compile of each algorithm link them. Each
library is run and checked against PyTorch, so a linked library that computed something
else would stop the benchmark.

    python benchmarks/kernel_reuse.py                        # ResNet18, MobileNetV2 at 0.5, 16x16
    python benchmarks/kernel_reuse.py --size 32 --levels 0.5 0.9 0.99 --layouts NCHW NCHWc
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.kernel_objects import KernelObjects
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.compression.pruning import make_permanent, prune_weights_global_l1
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.targets.host import detect_host_cpu, host_target

DENSE = ["direct", "gemm", "spatial_pack"]


def compiled(imported: ImportedModel, model: torch.nn.Module, algorithm: str, layout: str,
             out: Path, kernels: KernelObjects | None, x: np.ndarray) -> tuple[float, bool]:
    """(compile seconds, kernels linked) of one checked compile."""
    algo = registry.create("algorithms", algorithm, {} if layout == "NCHW" else {"layout": layout})
    result = compile_model(imported, algo, host_target(), out, kernels=kernels)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    check = verify_outputs(run_batch(load_vm(result.executable_path), x), ref)
    if not check.passed:
        raise SystemExit(f"{algorithm} {layout}: {check.explain()}")
    return result.compile_seconds, result.kernels_reused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--width", type=float, default=0.5)
    parser.add_argument("--size", type=int, default=16, help="input side (digits 16, CIFAR 32)")
    parser.add_argument("--algorithms", nargs="+", default=DENSE, choices=DENSE)
    parser.add_argument("--layouts", nargs="+", default=["NCHW"], choices=["NCHW", "NHWC", "NCHWc"])
    parser.add_argument("--levels", nargs="+", type=float, default=[0.8],
                        help="pruning levels, each compiled both ways")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    registry.load_plugins()
    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}); seconds per compile; "
          "built: the pruned model's kernels built (previous path); linked: the unpruned "
          "model's kept kernels linked")
    print(f"{'model':<12} {'algorithm':<20} {'level':>6} {'unpruned':>9} {'built':>7} "
          f"{'linked':>7} {'linked/built':>13}")
    shape = (1, 3, args.size, args.size)
    x = np.random.default_rng(0).standard_normal((2, *shape[1:])).astype(np.float32)
    records, ratios = [], []
    for name in args.models:
        torch.manual_seed(0)
        dense = registry.create("models", name, {"width_multiplier": args.width},
                                num_classes=10, input_shape=shape[1:]).eval()
        pruned = {lv: make_permanent(prune_weights_global_l1(copy.deepcopy(dense), lv)).eval()
                  for lv in args.levels}
        imported = {lv: import_torch_model(m, shape) for lv, m in pruned.items()}
        imp_dense = import_torch_model(dense, shape)
        for algorithm in args.algorithms:
            for layout in args.layouts:
                with tempfile.TemporaryDirectory() as tmp:
                    kept = KernelObjects(Path(tmp) / "kernels")
                    first, _ = compiled(imp_dense, dense, algorithm, layout, Path(tmp) / "d",
                                        kept, x)
                    for i, lv in enumerate(args.levels):
                        # alternate which way goes first, so a drifting machine load
                        # lands on both alike
                        ways = [("built", None), ("linked", kept)][:: 1 if i % 2 == 0 else -1]
                        secs: dict[str, float] = {}
                        for way, kernels in ways:
                            s, linked = compiled(imported[lv], pruned[lv], algorithm, layout,
                                                 Path(tmp) / f"{lv}{way}", kernels, x)
                            if linked != (way == "linked"):
                                raise SystemExit(f"{algorithm} {layout} {lv}: kernels "
                                                 f"{'linked' if linked else 'built'}, "
                                                 f"expected {way}")
                            secs[way] = s
                        ratio = secs["linked"] / secs["built"]
                        ratios.append(ratio)
                        label = algorithm + ("" if layout == "NCHW" else f" {layout}")
                        print(f"{name:<12} {label:<20} {lv:>6.0%} {first:>9.2f} "
                              f"{secs['built']:>7.2f} {secs['linked']:>7.2f} {ratio:>13.2f}",
                              flush=True)
                        records.append({"model": name, "algorithm": algorithm,
                                        "layout": layout, "level": lv, "unpruned_s": first,
                                        **secs})
    print(f"linked/built: median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} compiles")
    if args.json:
        args.json.write_text(json.dumps({"cpu": cpu.get("model"), "records": records}, indent=1))


if __name__ == "__main__":
    main()
