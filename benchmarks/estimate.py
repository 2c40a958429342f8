"""`dlas plan --estimate` against measured wall times: two small sweeps, run for real.

1. Sweep A is estimated in an empty workspace (so from the built-in cost model alone),
   then run; its measured seconds per stage are printed beside the estimate.
2. Sweep B (another width and more epochs of the same model, more algorithms, an
   ONNX Runtime baseline A never ran) is estimated in the same workspace, now from A's
   measured stage costs where they are similar and the built-in model elsewhere, then
   run and compared the same way.

Ratios are estimate / measured: 1.0 is exact, 2.0 an estimate twice too long. Measured
stage seconds are the runner's own per-stage totals (only entries it computed); "run
wall" is the whole `Runner.run`, which also loads cached entries and writes rows. Run
on an otherwise idle machine (about 4 minutes on 2 cores):

    python benchmarks/estimate.py [--keep DIR]

`--probes N` instead reads the machine probes N times (`dlas.estimate.machine_speed`: the
Python workload, the LLVM build, the training conv) and prints each reading's scale and
their spread: what a session on a new host runs to check the reference constants against
the quickstart's measured stage seconds.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from dlas import registry
from dlas.estimate import Estimate, estimate_sweep
from dlas.estimate.render import duration
from dlas.runner.console import RunConsole
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.stages import STAGES as STAGE_ORDER
from dlas.sweep.config import SweepConfig, parse_config

SWEEP_A = """
name: estimate-a
datasets: [digits]
models:
  - {name: resnet18, params: {width_multiplier: 0.25}}
compression:
  - none
  - {name: weight_pruning, params: {sparsity: 0.8, steps: [0.5, 0.8]}}
algorithms: [direct, direct_csr]
tuning: [none, pytorch]
budgets: {epochs: 2, batch_size: 64, finetune_epochs: 2, finetune_lr: 0.01,
          measure_repeat: 50, verify_samples: 16, seed: 0}
"""

SWEEP_B = """
name: estimate-b
datasets: [digits]
models:
  - {name: resnet18, params: {width_multiplier: 0.5}}
compression:
  - none
  - {name: weight_pruning, params: {sparsity: 0.8, steps: [0.5, 0.8]}}
algorithms: [direct, gemm, direct_csr, gemm_csr]
tuning: [none, pytorch, onnxruntime]
budgets: {epochs: 3, batch_size: 64, finetune_epochs: 3, finetune_lr: 0.01,
          measure_repeat: 100, verify_samples: 16, seed: 0}
"""


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _run(config: SweepConfig, ws: Workspace) -> RunReport:
    """Every timing pass, as `dlas run` takes them and the estimate counts them; the
    report's stage counts and seconds summed over the passes (`run_in_passes` returns
    the last pass's, which computed only timings)."""
    from dlas.runner.passes import run_in_passes

    quiet = RunConsole(progress=False, console=Console(file=io.StringIO()))
    runner = Runner(ws, progress=False, console=quiet)
    passes: list[RunReport] = []
    one_pass = runner.run

    def run(*args: Any, **kwargs: Any) -> RunReport:
        passes.append(one_pass(*args, **kwargs))
        return passes[-1]

    runner.run = run  # type: ignore[method-assign]
    report = run_in_passes(runner, config)
    for earlier in passes:
        if earlier is not report:
            report.computed.update(earlier.computed)
            for stage, seconds in earlier.seconds.items():
                report.seconds[stage] += seconds
    return report


def _compare(title: str, est: Estimate, report: RunReport) -> None:
    print(f"\n{title}")
    print(f"  {'stage':<9} {'computed':>8} {'estimated':>11} {'measured':>11} {'ratio':>6}"
          f"  {'from measurements':>17}")
    for stage in STAGE_ORDER:
        summary = next((s for s in est.stages if s.stage == stage), None)
        measured = report.seconds.get(stage, 0.0)
        if summary is None and not measured:
            continue
        estimated = summary.seconds if summary else 0.0
        share = f"{100 * summary.measured_s / estimated:.0f}%" if summary and estimated else "-"
        ratio = f"{estimated / measured:.2f}" if measured > 0 else "-"
        print(f"  {stage:<9} {report.computed.get(stage, 0):>8} {duration(estimated):>11} "
              f"{duration(measured):>11} {ratio:>6}  {share:>17}")
    stages_s = sum(report.seconds.values())
    print(f"  {'total':<9} {sum(report.computed.values()):>8} {duration(est.total_s):>11} "
          f"{duration(stages_s):>11} {est.total_s / stages_s:>6.2f}  "
          f"{100 * est.measured_s / est.total_s:>16.0f}%")
    print(f"  {'run wall':<9} {'':>8} {duration(est.total_s):>11} "
          f"{duration(report.wall_seconds):>11} {est.total_s / report.wall_seconds:>6.2f}")
    print(f"  on 4 workers the estimate is {duration(est.parallel.makespan_s)} (critical path "
          f"{duration(est.parallel.critical_path_s)})")


def _probes(times: int) -> None:
    import numpy as np

    from dlas.estimate.machine_speed import (
        REFERENCE_COMPILE_S,
        REFERENCE_GMACS,
        REFERENCE_SERIAL_S,
        compile_seconds,
        conv_gmacs,
        serial_seconds,
    )

    rows = []
    for _ in range(times):
        build = compile_seconds()
        rows.append((serial_seconds() / REFERENCE_SERIAL_S,
                     (build or float("nan")) / REFERENCE_COMPILE_S,
                     REFERENCE_GMACS / conv_gmacs()))
    data = np.array(rows)
    print(f"CPU: {_cpu()}; {times} readings of each probe, as scales (1.0: the cost "
          "model's machine; lower: faster)")
    for name, col in zip(("python workload (serial)", "LLVM build (serial)",
                          "training conv (MACs)"), data.T, strict=True):
        print(f"  {name:<26} min {np.nanmin(col):.2f}  median {np.nanmedian(col):.2f}  "
              f"max {np.nanmax(col):.2f}")
    serial = np.fmin(data[:, 0], data[:, 1])
    print(f"  serial scale used (the lower of the two): {' '.join(f'{v:.2f}' for v in serial)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="workspace folder to keep (default: a temp one)")
    parser.add_argument("--probes", type=int, default=0,
                        help="read the machine probes this many times and stop")
    args = parser.parse_args()
    if args.probes:
        _probes(args.probes)
        return
    registry.load_plugins()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dlas-estimate-"))
    ws = Workspace(root)
    try:
        results = []
        for name, text in (("A (empty workspace: built-in model)", SWEEP_A),
                           ("B (estimated from A's measured costs)", SWEEP_B)):
            config = parse_config(text, source=f"sweep {name[0]}")
            est = estimate_sweep(config, ws.cache_dir, ws.db_path, workers=4)
            report = _run(config, ws)
            results.append((f"sweep {name}", est, report))
        print(f"CPU: {_cpu()}; {len(os.sched_getaffinity(0))} cores; load average at the "
              f"end {os.getloadavg()[0]:.1f} (measure and baseline stages wait, up to "
              "budgets.noise_budget_s per point, while other processes keep the CPUs busy)")
        for title, est, report in results:
            _compare(title, est, report)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
