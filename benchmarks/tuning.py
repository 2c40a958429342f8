"""Untuned vs MetaSchedule-tuned dense algorithms, beside ONNX Runtime and PyTorch.

CIFAR ResNet18 and MobileNetV2 (random weights, batch 1, fp32) are compiled with each
dense algorithm, untuned (the minimal thread-parallel schedules) and tuned with a fixed
budget of `--trials-per-task` trials per task, in a persistent tuning database
(`--workspace`, per target). All latencies come from the same run, same threads: median
of `--repeat` runs after a discarded warm-up, and every compiled variant is checked
against PyTorch first.

Run it twice: the first run tunes (tuning time per variant in the table), the second
finds every task in the database (the "reused" column) and re-tunes nothing, so its
latencies can be taken on an idle machine.

    python benchmarks/tuning.py [--models resnet18 mobilenetv2] [--trials-per-task 64]
        [--csr gemm_csr --sparsity 0.95]   # also CSR algorithms on the pruned model
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
from dlas.compiler.relax_import import ImportedModel, import_torch_model  # noqa: E402
from dlas.compression.pruning import make_permanent, prune_weights_global_l1  # noqa: E402
from dlas.measure.verify import verify_outputs  # noqa: E402
from dlas.measure.vm_timing import load_vm, run_batch, set_num_threads, time_vm  # noqa: E402
from dlas.sweep.config import Budgets  # noqa: E402
from dlas.targets.base import TargetSpec  # noqa: E402
from dlas.targets.host import detect_host_cpu, host_target  # noqa: E402
from dlas.tuning.base import TuningContext  # noqa: E402
from dlas.tuning.metaschedule.options import MetaScheduleParams, metaschedule  # noqa: E402

DENSE = ["direct", "gemm", "spatial_pack"]


def measure(imported: ImportedModel, x: torch.Tensor, ref, algorithm: str, target: TargetSpec,
            repeat: int, hook=None) -> tuple[float, float]:
    """(median ms, compile s) of the model compiled with `algorithm` (and `hook`)."""
    algo = registry.create("algorithms", algorithm, {})
    with tempfile.TemporaryDirectory() as tmp:
        compiled = compile_model(imported, algo, target.tvm_target, Path(tmp), schedule_hook=hook)
        vm = load_vm(compiled.executable_path)
        check = verify_outputs(run_batch(vm, x.numpy()), ref)
        if not check.passed:
            raise SystemExit(f"{algorithm}{' tuned' if hook else ''}: {check.explain()}")
        ms = statistics.median(time_vm(vm, x.numpy(), repeat=repeat)) * 1e3
    return ms, compiled.compile_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--algorithms", nargs="*", default=DENSE)
    parser.add_argument("--csr", nargs="*", default=[],
                        help="CSR algorithms, run on the model pruned to --sparsity")
    parser.add_argument("--sparsity", type=float, default=0.95)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--trials-per-task", type=int, default=64)
    parser.add_argument("--tasks", choices=["all", "convs"], default="convs")
    parser.add_argument("--population", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=150)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workspace", type=Path, default=Path("dlas-workspace/benchmark-tuning"))
    args = parser.parse_args()

    registry.load_plugins()
    torch.set_num_threads(args.threads)
    set_num_threads(args.threads)
    cpu = detect_host_cpu()
    target = TargetSpec(name="host", tvm_target=host_target(args.threads),
                        num_threads=args.threads, fingerprint={"cpu": cpu.get("model")})
    params = MetaScheduleParams(trials=10**9, trials_per_task=args.trials_per_task,
                                trials_per_iter=min(64, args.trials_per_task),
                                early_stopping=None, population=args.population,
                                tasks=args.tasks)
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), threads {args.threads}, batch 1, "
          f"fp32, median of {args.repeat} runs; tuned: MetaSchedule, {args.trials_per_task} "
          f"trials per task ({args.tasks}), database {args.workspace}")
    print(f"{'model':<12} {'variant':<20} {'ms':>8} {'vs ORT':>7} {'vs PyTorch':>10} "
          f"{'tuning s':>9} {'trials':>7} {'tasks tuned':>11} {'reused':>7}")
    for name in args.models:
        torch.manual_seed(0)
        model = registry.create("models", name, {"width_multiplier": args.width},
                                num_classes=10, input_shape=(3, 32, 32)).eval()
        x = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            ref_dense = model(x).numpy()
        with tempfile.TemporaryDirectory() as tmp:
            ort_ms = statistics.median(
                time_onnxruntime(model, x, args.repeat, args.threads, Path(tmp))[0]) * 1e3
        torch_ms = statistics.median(time_torch(model, x, args.repeat)) * 1e3
        print(f"{name:<12} {'ONNX Runtime':<20} {ort_ms:>8.3f}")
        print(f"{name:<12} {'PyTorch':<20} {torch_ms:>8.3f}", flush=True)
        dense = import_torch_model(model, tuple(x.shape))
        pruned = make_permanent(prune_weights_global_l1(copy.deepcopy(model), args.sparsity))
        with torch.no_grad():
            pruned_ref = pruned(x).numpy()
        sparse = import_torch_model(pruned, tuple(x.shape)) if args.csr else None
        for algorithm in args.algorithms + args.csr:
            csr = algorithm in args.csr
            imported, ref = (sparse, pruned_ref) if csr else (dense, ref_dense)
            algorithm_label = f"{algorithm} {args.sparsity:.0%}" if csr else algorithm
            ms, _ = measure(imported, x, ref, algorithm, target, args.repeat)
            print(f"{name:<12} {algorithm_label + ' untuned':<20} {ms:>8.3f} {ms / ort_ms:>6.1f}x "
                  f"{ms / torch_ms:>9.1f}x", flush=True)
            ctx = TuningContext(target=target, budgets=Budgets(), work_dir=args.workspace,
                                say=lambda line: print(f"    {line}", file=sys.stderr,
                                                       flush=True))
            hook = metaschedule(params, ctx)
            ms, _ = measure(imported, x, ref, algorithm, target, args.repeat, hook=hook)
            report = hook.report
            print(f"{name:<12} {algorithm_label + ' tuned':<20} {ms:>8.3f} {ms / ort_ms:>6.1f}x "
                  f"{ms / torch_ms:>9.1f}x {report.seconds:>9.0f} {report.trials:>7} "
                  f"{report.count('tuned'):>11} {report.count('reused'):>7}", flush=True)


if __name__ == "__main__":
    main()
