"""Every convolution algorithm, dense and CSR, untuned, beside PyTorch and ONNX Runtime.

CIFAR ResNet18 and MobileNetV2 (random weights, batch 1, fp32) are compiled with each
dense algorithm, and pruned to `--sparsity` (global L1 over conv weights, as the
weight_pruning option does) for each CSR algorithm. All timings come from the same run
with the same threads: median of `--repeat` runs after a discarded warm-up.

The sparse variants' *percentage of expected speedup* follows the paper: the speedup over
the best dense variant, divided by the ideal 1 / (1 - sparsity).

    python benchmarks/algorithms.py [--models resnet18 mobilenetv2] [--sparsity 0.95]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from untuned_direct import time_onnxruntime, time_torch  # noqa: E402

from dlas import registry  # noqa: E402
from dlas.compiler.build import compile_model  # noqa: E402
from dlas.compiler.relax_import import import_torch_model  # noqa: E402
from dlas.compression.pruning import make_permanent, prune_weights_global_l1  # noqa: E402
from dlas.measure.verify import verify_outputs  # noqa: E402
from dlas.measure.vm_timing import load_vm, run_batch, set_num_threads, time_vm  # noqa: E402
from dlas.targets.host import detect_host_cpu, host_target  # noqa: E402

DENSE = ["direct", "gemm", "spatial_pack"]
CSR = ["direct_csr", "gemm_csr", "spatial_pack_csr"]


def measure_tvm(model: torch.nn.Module, x: torch.Tensor, algorithm: str, threads: int,
                repeat: int) -> tuple[float, float, int]:
    """(median ms, compile s, fallback count) of `model` compiled with `algorithm`."""
    with torch.no_grad():
        ref = model(x).numpy()
    imported = import_torch_model(model, tuple(x.shape))
    algo = registry.create("algorithms", algorithm, {})
    with tempfile.TemporaryDirectory() as tmp:
        compiled = compile_model(imported, algo, host_target(threads), Path(tmp))
        vm = load_vm(compiled.executable_path)
        check = verify_outputs(run_batch(vm, x.numpy()), ref)
        if not check.passed:
            raise SystemExit(f"{algorithm}: {check.explain()}")
        ms = statistics.median(time_vm(vm, x.numpy(), repeat=repeat)) * 1e3
    return ms, compiled.compile_seconds, len(compiled.fallbacks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--algorithms", nargs="+", default=DENSE + CSR)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--sparsity", type=float, default=0.95)
    parser.add_argument("--repeat", type=int, default=150)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    registry.load_plugins()
    torch.set_num_threads(args.threads)
    set_num_threads(args.threads)
    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), threads {args.threads}, batch 1, "
          f"fp32, untuned, median of {args.repeat} runs; CSR at {args.sparsity:.0%} sparsity")
    print(f"{'model':<12} {'variant':<17} {'ms':>8} {'vs ORT':>7} {'vs PyTorch':>10} "
          f"{'% expected':>10} {'compile s':>9} {'fallbacks':>9}")
    ideal = 1.0 / (1.0 - args.sparsity)
    for name in args.models:
        torch.manual_seed(0)
        model = registry.create("models", name, {"width_multiplier": args.width},
                                num_classes=10, input_shape=(3, 32, 32)).eval()
        x = torch.randn(1, 3, 32, 32)
        with tempfile.TemporaryDirectory() as tmp:
            ort_ms = statistics.median(
                time_onnxruntime(model, x, args.repeat, args.threads, Path(tmp))[0]) * 1e3
        torch_ms = statistics.median(time_torch(model, x, args.repeat)) * 1e3
        print(f"{name:<12} {'ONNX Runtime':<17} {ort_ms:>8.3f}")
        print(f"{name:<12} {'PyTorch':<17} {torch_ms:>8.3f}")
        sparse = make_permanent(prune_weights_global_l1(copy.deepcopy(model), args.sparsity))
        best_dense = None
        for algorithm in args.algorithms:
            csr = algorithm.endswith("_csr")
            ms, compile_s, fallbacks = measure_tvm(sparse if csr else model, x, algorithm,
                                                   args.threads, args.repeat)
            if not csr:
                best_dense = ms if best_dense is None else min(best_dense, ms)
            label = f"{algorithm} ({args.sparsity:.0%})" if csr else algorithm
            expected = (f"{100 * best_dense / ms / ideal:>9.1f}%"
                        if csr and best_dense else f"{'':>10}")
            print(f"{name:<12} {label:<17} {ms:>8.3f} {ms / ort_ms:>6.1f}x "
                  f"{ms / torch_ms:>9.1f}x {expected} {compile_s:>9.1f} {fallbacks:>9}",
                  flush=True)


if __name__ == "__main__":
    main()
