"""Tuning throughput: dlas's MetaSchedule session beside raw `ms.tune_tir` on the same task.

The task is a ResNet18-like conv block (conv 3x3 + batch norm + ReLU, `--channels` in and
out at `--size`x`--size`, the shape of CIFAR ResNet18 width 0.5's second stage) lowered
with `--algorithm`. Both tune it with the same trials, batch size, population and
builder workers, one after the other in the same run:

* raw: `ms.tune_tir` on the task's PrimFunc with MetaSchedule's defaults (its local
  builder and runner, its own database);
* dlas: the `metaschedule` compile hook on the model (the task's minimal schedule measured
  as a candidate first, one session, dlas's builder without the tensor-intrinsic import).

Printed per side: wall seconds, trials per second, best latency, and the seconds until the
best measured latency first reaches the task's untuned (minimal schedule) latency, the
"given latency": what a user waits before tuning has paid anything.

    python benchmarks/tuning_throughput.py [--trials 32] [--algorithm spatial_pack]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import import_torch_model
from dlas.measure.vm_timing import set_num_threads
from dlas.sweep.config import Budgets
from dlas.targets.base import TargetSpec
from dlas.targets.host import detect_host_cpu, host_target
from dlas.tuning.base import TuningContext
from dlas.tuning.metaschedule.options import MetaScheduleParams, metaschedule
from dlas.tuning.metaschedule.tasks import Task, extract


@derived_object
class BestOverTime(PyMeasureCallback):
    """(seconds since start, best us so far) after every measured batch."""

    def __init__(self, start: float) -> None:
        super().__init__()
        self.start = start
        self.best: float | None = None
        self.trace: list[tuple[float, float]] = []

    def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any,
              builder_results: Any, runner_results: Any) -> None:
        for built, ran in zip(builder_results, runner_results, strict=True):
            if built.error_msg or ran.error_msg or not ran.run_secs:
                continue
            us = sum(float(s) for s in ran.run_secs) / len(ran.run_secs) * 1e6
            self.best = us if self.best is None else min(self.best, us)
        if self.best is not None:
            self.trace.append((time.perf_counter() - self.start, self.best))


def reached(trace: list[tuple[float, float]], goal: float) -> str:
    hit = next((t for t, best in trace if best <= goal), None)
    return f"{hit:.0f}" if hit is not None else "never"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--per-iter", type=int, default=8)
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--algorithm", default="spatial_pack")
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    registry.load_plugins()
    set_num_threads(args.threads)
    cpu = detect_host_cpu()
    target = TargetSpec(name="host", tvm_target=host_target(args.threads),
                        num_threads=args.threads, fingerprint={"cpu": cpu.get("model")})
    torch.manual_seed(0)
    c = args.channels
    model = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()).eval()
    imported = import_torch_model(model, (1, c, args.size, args.size))
    algorithm = registry.create("algorithms", args.algorithm, {})
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), {args.threads} threads; task: "
          f"{args.algorithm} conv {c}->{c} 3x3 at {args.size}x{args.size} + BN + ReLU; "
          f"{args.trials} trials, {args.per_iter} per batch, population {args.population}, "
          f"{args.threads} builder workers")

    with tempfile.TemporaryDirectory() as tmp:
        # dlas first: it also gives the task and its minimal latency (the goal)
        lines: list[tuple[float, str]] = []
        start = time.perf_counter()

        def say(line: str) -> None:
            lines.append((time.perf_counter() - start, line))

        params = MetaScheduleParams(trials=args.trials, trials_per_task=args.trials,
                                    trials_per_iter=args.per_iter, population=args.population,
                                    early_stopping=None, tasks="convs", transfer=False)
        hook = metaschedule(params, TuningContext(target=target, budgets=Budgets(),
                                                  work_dir=Path(tmp) / "dlas", say=say))
        captured: list[Task] = []

        def capture_then_tune(mod: Any, tvm_target: Any) -> Any:
            captured.extend(t for t in extract(mod, tvm_target) if t.algorithms)
            return hook(mod, tvm_target)

        start = time.perf_counter()
        compile_model(imported, algorithm, target.tvm_target, Path(tmp) / "a",
                      schedule_hook=capture_then_tune)
        dlas_s = hook.report.seconds
        (report,) = [t for t in hook.report.tasks if t.outcome == "tuned"]
        goal = report.minimal_us
        dlas_trace: list[tuple[float, float]] = []
        if goal is not None:
            measured = next(t for t, line in lines if line.startswith("minimal schedules"))
            dlas_trace.append((measured, goal))
        for t, line in lines:
            m = re.search(r"best ([\d.]+) us", line)
            if m:
                dlas_trace.append((t, min(float(m.group(1)), dlas_trace[-1][1]
                                          if dlas_trace else float("inf"))))

        (task,) = captured
        start = time.perf_counter()
        recorder = BestOverTime(start)
        ms.tune_tir(task.mod, target.tvm_target, str(Path(tmp) / "raw"),
                    max_trials_global=args.trials, num_trials_per_iter=args.per_iter,
                    strategy=ms.search_strategy.EvolutionarySearch(
                        population_size=args.population,
                        init_min_unmeasured=min(50, args.population)),
                    builder=ms.builder.LocalBuilder(max_workers=args.threads, timeout_sec=300),
                    measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                       recorder])
        raw_s = time.perf_counter() - start

    print(f"untuned (minimal schedule) latency of the task: {goal:.1f} us")
    print(f"{'':<22} {'wall s':>7} {'trials':>7} {'trials/s':>9} {'best us':>9} "
          f"{'s to <= untuned':>16}")
    rows = [("raw ms.tune_tir", raw_s, args.trials, recorder.best, recorder.trace),
            ("dlas session", dlas_s, report.trials, report.best_us, dlas_trace)]
    for label, seconds, trials, best, trace in rows:
        print(f"{label:<22} {seconds:>7.1f} {trials:>7} {trials / seconds:>9.3f} "
              f"{best or float('nan'):>9.1f} {reached(trace, goal):>16}")
    ratio = (report.trials / dlas_s) / (args.trials / raw_s)
    print(f"dlas / raw: {ratio:.2f}x the trials per second (dlas's wall time includes "
          "measuring the minimal schedule)")


if __name__ == "__main__":
    main()
