"""`dlas reproduce` on a Ray cluster beside the same reproduction run locally.

Both start from an empty workspace and run one experiment's profile through the product's
own path (`dlas.report.reproduce.reproduce`): once with the local executor (the peer, same
run), once with the Ray executor on a multi-node cluster on this machine's loopback
(`ray.cluster_utils.Cluster`, on the workspace's token, as `dlas reproduce ... --executor
ray` joins one). Printed: wall time of each, the ratio, the estimate for 1 and N workers
(`dlas plan --estimate --workers N`, from the local run's measured stage costs), and
whether both reports reach the same verdict on every observation.

The nodes share this machine's cores (`--cpus-per-node`, default 1, so two nodes hold
the 2 cores of these VMs): this measures what the cluster path costs and checks that it
reaches the local result, not a speed-up; on a real cluster each node brings its own
cores, and the N-worker estimate is the expectation.

    python benchmarks/reproduce_cluster.py [--experiment cifar10_cpu] [--profile quick]
                                           [--nodes 2] [--cpus-per-node 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import tempfile
import time
from pathlib import Path

from dlas import registry
from dlas.estimate import estimate_sweep
from dlas.estimate.estimate import Estimate
from dlas.estimate.measured import load_workspace
from dlas.estimate.render import duration
from dlas.report.reproduce import Reproduction, reproduce
from dlas.runner.workspace import Workspace
from dlas.sweep.config import load_config


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _verdicts(result: Reproduction) -> dict[str, str]:
    """Observation number -> our verdict, from the report's heading of each observation
    ("### IX: held")."""
    verdicts = {}
    for line in result.report.markdown.read_text().splitlines():
        m = re.match(r"#+\s+([IVX]+): (.+)$", line)
        if m:
            verdicts.setdefault(m.group(1), m.group(2).strip())
    return verdicts


def estimates(local: Reproduction, local_ws: Workspace, empty: Path, nodes: int
              ) -> dict[int, Estimate]:
    """`dlas plan --estimate --workers N` for 1 and N workers from an empty workspace,
    with the stage costs the local run measured."""
    config = load_config(local.sweep_file)
    record = load_workspace(local_ws.cache_dir, local_ws.db_path)
    return {n: estimate_sweep(config, empty / "cache", empty / "results.db", workers=n,
                              record=record) for n in (1, nodes)}


def _on_cluster(args: argparse.Namespace, root: Path) -> tuple[float, Reproduction]:
    import ray
    from ray.cluster_utils import Cluster

    from dlas.runner.ray_auth import secured_ray
    from dlas.runner.ray_executor import RayRunner

    ws = Workspace(root)
    with secured_ray(root, loopback=True):
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for _ in range(args.nodes):
                cluster.add_node(num_cpus=args.cpus_per_node)
            cluster.wait_for_nodes()
            env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            ray.init(address=cluster.address, include_dashboard=False,
                     runtime_env={"env_vars": env}, logging_level="ERROR",
                     log_to_driver=False)
            start = time.perf_counter()
            result = reproduce(args.experiment, args.profile, ws, progress=False,
                               executor=RayRunner(ws, progress=False))
            return time.perf_counter() - start, result
        finally:
            ray.shutdown()
            cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="cifar10_cpu")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--cpus-per-node", type=float, default=1)
    parser.add_argument("--keep", type=Path, help="keep the workspaces here")
    args = parser.parse_args()
    registry.load_plugins()
    base = args.keep or Path(tempfile.mkdtemp(prefix="dlas-reproduce-cluster-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {_cpu()}; {len(os.sched_getaffinity(0))} cores; "
          f"{args.experiment} --profile {args.profile}")
    try:
        local_ws = Workspace(base / "local")
        start = time.perf_counter()
        local = reproduce(args.experiment, args.profile, local_ws, progress=False)
        local_wall = time.perf_counter() - start
        ray_wall, on_ray = _on_cluster(args, base / "ray")

        est = estimates(local, local_ws, base / "empty", args.nodes)
        print(f"\n{'executor':<34}{'ok':>4}{'failed':>8}{'wall':>10}{'x local':>9}"
              f"{'estimate':>11}")
        for name, wall, result, workers in (
                ("local", local_wall, local, 1),
                (f"ray, {args.nodes} loopback node(s) x "
                 f"{args.cpus_per_node:g} CPU", ray_wall, on_ray, args.nodes)):
            run = result.run
            print(f"{name:<34}{run.ok:>4}{run.failed:>8}{duration(wall):>10}"
                  f"{wall / local_wall:>9.2f}"
                  f"{duration(est[workers].parallel.makespan_s):>11}")
        mine, theirs = _verdicts(local), _verdicts(on_ray)
        same = sorted(k for k in mine if theirs.get(k) == mine[k])
        differ = {k: (mine[k], theirs.get(k)) for k in mine if theirs.get(k) != mine[k]}
        print(f"\nobservations with the same verdict locally and on the cluster: "
              f"{len(same)} of {len(mine)} ({', '.join(same) or '-'})")
        for k, (a, b) in differ.items():
            print(f"  {k}: local {a}, cluster {b}")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
