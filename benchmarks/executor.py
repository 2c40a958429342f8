"""The executors side by side: local, Ray on a local instance, Ray on 1, 2 and 4 nodes.

One small real sweep (ResNet18 at width 0.25 on digits: 1 training, 2 compressions,
2 imports, 4 compiles, 4 measurements) runs from an empty workspace under each executor.
Printed per executor: the wall time, its ratio to the local executor's (the peer, same
run), the scheduling overhead per computed stage ((wall - local wall) / stages), and the
estimate's prediction for that many workers (`dlas plan --estimate`).

The "nodes" are `ray.cluster_utils.Cluster` nodes on this machine (2 CPUs each), so they
share its cores: on a 2-core machine more nodes cannot run faster, and what this measures
is what the Ray executor costs on top of the work (worker start-up, task dispatch, the
machine lock keeping timings apart). On a real cluster each node brings its own cores,
and the last table predicts the paper's full CIFAR-10 CPU profile from the estimate plus
the overhead measured here.

    python benchmarks/executor.py [--nodes 1 2 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from dlas import registry
from dlas.estimate import estimate_sweep
from dlas.estimate.render import duration
from dlas.runner.console import RunConsole
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.sweep.config import SweepConfig, parse_config

SWEEP = """
name: executor-bench
datasets: [digits]
models:
  - {name: resnet18, params: {width_multiplier: 0.25}}
compression:
  - none
  - {name: weight_pruning, params: {sparsity: 0.8, steps: [0.8]}}
algorithms: [direct, gemm]
budgets: {epochs: 1, batch_size: 64, finetune_epochs: 1, finetune_lr: 0.01,
          measure_repeat: 20, verify_samples: 16, seed: 0}
"""

STORED = ("train", "compress", "import", "compile", "measure", "baseline")


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _quiet() -> RunConsole:
    import io

    from rich.console import Console

    return RunConsole(progress=False, console=Console(file=io.StringIO(), width=200))


def _local(config: SweepConfig, root: Path) -> tuple[float, RunReport]:
    start = time.perf_counter()
    report = Runner(Workspace(root), console=_quiet()).run(config)
    return time.perf_counter() - start, report


def _ray(config: SweepConfig, root: Path, nodes: int | None) -> tuple[float, RunReport]:
    """`nodes` None: a local Ray instance started by the executor (dlas run --executor
    ray); else a head that runs nothing plus `nodes` 2-CPU nodes."""
    import ray

    from dlas.runner.ray_auth import secured_ray
    from dlas.runner.ray_executor import RayRunner

    if nodes is None:
        start = time.perf_counter()  # a local instance's start-up is part of its cost
        report = RayRunner(Workspace(root), console=_quiet()).run(config)
        return time.perf_counter() - start, report
    from ray.cluster_utils import Cluster

    # on loopback and on the workspace's token, as the clusters dlas starts
    with secured_ray(root, loopback=True):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for _ in range(nodes):
                cluster.add_node(num_cpus=2)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, include_dashboard=False,
                     logging_level="ERROR", log_to_driver=False)
            start = time.perf_counter()
            report = RayRunner(Workspace(root), console=_quiet()).run(config)
            return time.perf_counter() - start, report
        finally:
            ray.shutdown()
            cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--keep", type=Path, help="keep the workspaces here")
    args = parser.parse_args()
    registry.load_plugins()
    config = parse_config(SWEEP)
    base = args.keep or Path(tempfile.mkdtemp(prefix="dlas-executor-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {_cpu()}; {len(os.sched_getaffinity(0))} cores")
    try:
        runs: list[tuple[str, int, float, RunReport]] = []
        wall, report = _local(config, base / "local")
        runs.append(("local executor", 1, wall, report))
        wall, report = _ray(config, base / "ray-local", None)
        runs.append(("ray, local instance", 1, wall, report))
        for n in args.nodes:
            wall, report = _ray(config, base / f"ray-{n}", n)
            runs.append((f"ray, {n} node(s)", n, wall, report))

        local_wall = runs[0][2]
        empty = base / "empty"
        print(f"\nsweep: {runs[0][3].points} points; each run starts from an empty workspace")
        print(f"{'executor':<22}{'ok':>4}{'stages':>8}{'wall s':>9}{'x local':>9}"
              f"{'overhead/stage s':>18}{'estimate s':>12}")
        overhead = 0.0
        for name, workers, wall, rep in runs:
            stages = sum(rep.computed[s] for s in STORED)
            per_stage = (wall - local_wall) / stages if stages else 0.0
            if name.startswith("ray, local"):
                overhead = per_stage
            est = estimate_sweep(config, empty / "cache", empty / "results.db", workers=workers)
            print(f"{name:<22}{rep.ok:>4}{stages:>8}{wall:>9.1f}{wall / local_wall:>9.2f}"
                  f"{per_stage:>18.2f}{est.parallel.makespan_s:>12.1f}")
        _predict_full_profile(overhead)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


def _predict_full_profile(overhead_s: float) -> None:
    """The paper's full CIFAR-10 CPU profile on N nodes: the estimate's N-worker wall time
    plus the executor's overhead per stage measured above."""
    from dlas.report.experiments import load_experiment, resolve_sweep

    with tempfile.TemporaryDirectory() as tmp:
        config, _ = resolve_sweep(load_experiment("cifar10_cpu"), "full",
                                  skip_unregistered=True, write_to=Path(tmp) / "full.yaml")
        ws = Path(tmp) / "ws"
        print("\nfull cifar10_cpu profile, from an empty workspace (built-in cost model; "
              f"+{overhead_s:.2f} s per stage of executor overhead):")
        print(f"{'nodes':>6}{'estimate':>24}{'with overhead':>24}{'critical path':>16}")
        for n in (1, 2, 4, 8, 16, 32):
            est = estimate_sweep(config, ws / "cache", ws / "results.db", workers=n)
            extra = overhead_s * len(est.tasks) / n
            print(f"{n:>6}{duration(est.parallel.makespan_s):>24}"
                  f"{duration(est.parallel.makespan_s + extra):>24}"
                  f"{duration(est.parallel.critical_path_s):>16}")


if __name__ == "__main__":
    main()
