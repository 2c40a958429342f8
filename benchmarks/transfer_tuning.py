"""Transfer-tuning across a sweep: how much of full tuning's gain transferred schedules reach.

After Gibson & Cano, "Transfer-Tuning" (PACT 2022). CIFAR ResNet18 (full width) is tuned
with a budget of `--budget` trials (the source). Then each target model is compiled

* untuned (the algorithm's minimal schedules),
* tuned from scratch with the same budget (full tuning, its own database, no transfer),
* with transfer only: the source's database, the best schedules of structurally matching
  source tasks replayed on each task, measured, no search trials,
* with transfer plus budget/5 search trials (seeded by the transferred schedules).

For each, the table gives the latency, the share of full tuning's gain it reaches
((untuned - variant) / (untuned - full); n/a where full tuning gained under 3%, within
timing noise), and what it spent: search trials, and
transferred schedules measured. Targets: MobileNetV2, VGG-16, ResNet18 channel-pruned
(filters removed: a smaller dense model with other shapes) and ResNet18 at width 0.5.
Every compiled variant is checked against PyTorch; latencies are medians of `--repeat`
runs, all in the same run, with the same threads.

    python benchmarks/transfer_tuning.py [--budget 40] [--algorithm spatial_pack]
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch, set_num_threads, time_vm
from dlas.sweep.config import Budgets
from dlas.targets.base import TargetSpec
from dlas.targets.host import detect_host_cpu, host_target
from dlas.tuning.base import TuningContext
from dlas.tuning.metaschedule.options import MetaScheduleParams, metaschedule


@dataclass
class Variant:
    ms: float
    trials: int = 0
    transferred: int = 0
    seconds: float = 0.0


def cifar(name: str, width: float = 1.0) -> torch.nn.Module:
    torch.manual_seed(0)
    return registry.create("models", name, {"width_multiplier": width}, num_classes=10,
                           input_shape=(3, 32, 32)).eval()


def channel_pruned_resnet18(level: float) -> torch.nn.Module:
    """ResNet18 with `level` of its filters pruned (global L1) and removed."""
    from dlas.compression.channel import batchnorm_after_conv, prune_channels_global_l1
    from dlas.compression.physical import remove_zero_channels

    model = cifar("resnet18")
    prune_channels_global_l1(model, level, batchnorm_after_conv(model))
    example = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    model, _ = remove_zero_channels(model, example)
    return model.eval()


def compile_and_time(imported: ImportedModel, x: torch.Tensor, ref, algorithm: str,
                     target: TargetSpec, repeat: int, hook=None) -> float:
    """Median ms of the model compiled with `algorithm` (and `hook`), after checking it."""
    algo = registry.create("algorithms", algorithm, {})
    with tempfile.TemporaryDirectory() as tmp:
        compiled = compile_model(imported, algo, target.tvm_target, Path(tmp), schedule_hook=hook)
        vm = load_vm(compiled.executable_path)
        check = verify_outputs(run_batch(vm, x.numpy()), ref)
        if not check.passed:
            raise SystemExit(f"{algorithm}: {check.explain()}")
        return statistics.median(time_vm(vm, x.numpy(), repeat=repeat)) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=40, help="full tuning's trials per model")
    parser.add_argument("--algorithm", default="spatial_pack")
    parser.add_argument("--targets", nargs="+",
                        default=["mobilenetv2", "vgg16", "resnet18_channel50", "resnet18_w0.5"])
    parser.add_argument("--per-iter", type=int, default=8)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--workspace", type=Path,
                        default=Path("dlas-workspace/benchmark-transfer"))
    args = parser.parse_args()

    registry.load_plugins()
    torch.set_num_threads(args.threads)
    set_num_threads(args.threads)
    cpu = detect_host_cpu()
    target = TargetSpec(name="host", tvm_target=host_target(args.threads),
                        num_threads=args.threads, fingerprint={"cpu": cpu.get("model")})
    shutil.rmtree(args.workspace, ignore_errors=True)

    def say(line: str) -> None:
        print(f"    {line}", file=sys.stderr, flush=True)

    def hook(work: Path, trials: int, transfer: bool | str):
        params = MetaScheduleParams(trials=trials, trials_per_task=trials,
                                    trials_per_iter=min(args.per_iter, trials),
                                    early_stopping=None, population=args.population,
                                    tasks="convs", transfer=transfer)
        return metaschedule(params, TuningContext(target=target, budgets=Budgets(),
                                                  work_dir=work, say=say))

    def run(model: torch.nn.Module, work: Path | None, trials: int = 0,
            transfer: bool | str = False) -> Variant:
        x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            ref = model(x).numpy()
        imported = import_torch_model(model, tuple(x.shape))
        h = hook(work, max(trials, 1), transfer) if work is not None else None
        started = time.perf_counter()
        ms = compile_and_time(imported, x, ref, args.algorithm, target, args.repeat, h)
        if h is None:
            return Variant(ms)
        return Variant(ms, trials=h.report.trials, transferred=h.report.transfer_candidates,
                       seconds=time.perf_counter() - started)

    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), threads {args.threads}, batch 1, "
          f"fp32, CIFAR 32x32, {args.algorithm}, tasks: convs; full tuning {args.budget} "
          f"trials per model; median of {args.repeat} runs")
    source_db = args.workspace / "source"
    untuned_src = run(cifar("resnet18"), None)
    source = run(cifar("resnet18"), source_db, args.budget, transfer=False)
    print(f"source resnet18: untuned {untuned_src.ms:.3f} ms, tuned {source.ms:.3f} ms "
          f"({untuned_src.ms / source.ms:.2f}x) with {source.trials} trials in "
          f"{source.seconds:.0f}s", flush=True)
    print(f"{'target':<20} {'variant':<22} {'ms':>8} {'speedup':>8} {'of full':>8} "
          f"{'trials':>7} {'transfers':>9} {'tune s':>7}")
    builders = {"mobilenetv2": lambda: cifar("mobilenetv2"), "vgg16": lambda: cifar("vgg16"),
                "resnet18_channel50": lambda: channel_pruned_resnet18(0.5),
                "resnet18_w0.5": lambda: cifar("resnet18", 0.5)}
    for name in args.targets:
        model = builders[name]()
        untuned = run(copy.deepcopy(model), None)
        full = run(copy.deepcopy(model), args.workspace / f"full-{name}", args.budget, False)
        rows = [("untuned", untuned), (f"full ({args.budget} trials)", full)]
        for label, trials, transfer in (("transfer only", 0, "only"),
                                        (f"transfer + {args.budget // 5} trials",
                                         args.budget // 5, True)):
            work = args.workspace / f"{name}-{label.split()[0]}-{trials}"
            shutil.copytree(source_db, work)
            rows.append((label, run(copy.deepcopy(model), work, trials, transfer)))
        gain = untuned.ms - full.ms
        for label, v in rows:
            # a share of a gain within timing noise says nothing: n/a below 3%
            share = (f"{(untuned.ms - v.ms) / gain:>7.0%}" if gain > 0.03 * untuned.ms
                     else "    n/a")
            print(f"{name:<20} {label:<22} {v.ms:>8.3f} {untuned.ms / v.ms:>7.2f}x {share:>8} "
                  f"{v.trials:>7} {v.transferred:>9} {v.seconds:>7.0f}", flush=True)


if __name__ == "__main__":
    main()
