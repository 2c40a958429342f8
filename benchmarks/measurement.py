"""Timings you can trust: in-sweep vs alone, run to run, idle and beside a CPU hog.

Runs the quickstart (or `--config`) into a workspace, then times its artifacts again
with `dlas run --remeasure` in fresh timing workers, and prints, per placement of the
vCPUs (docs/timing.md):

- the figures as a row shows them after one `dlas run` (every timing pass of the
  config's `budgets.timing_passes` pooled): the sweep's own against the median of the
  remeasure invocations, and every two remeasure invocations (|log ratio|: median and
  worst), per runtime; this is what "independent runs agree" is about;
- the same for single timing runs, per runtime as the report's reproducibility section
  computes it (`dlas.results.reproducibility`), and for figures pooled over k = 1, 2, 3
  consecutive passes (what the number of passes buys);
- the width of the 95% confidence intervals, and how often the noisy flag fires, idle
  and with a CPU hog (a busy loop) on one core.

The peer, measured in the same session: the previous code path, every variant timed
back to back (150 samples, floating threads, no rounds), in a fresh process ("fresh")
and in a process that trained a model first ("after training", as the sweep's own
process was), each labelled with the placement probed before and after it. Its run to
run agreement is printed beside ours, and "after training" vs "fresh" within one
placement answers whether the process's history biases a timing.

Beside these within-workspace figures, `--independent N` (default 2) runs N independent
invocations, each in its own copy of the workspace without results or timing history,
and prints how far they agree and how often each kind of interval covered the next one
(`benchmarks/independent.py`, which also runs alone): what a user comparing with last
week's run meets.

Every figure is computed by dlas's own path (`dlas.results.latency.latency_columns` over
the runs in question), so a number here and a sweep's row mean the same thing.

    python benchmarks/measurement.py [--workspace DIR] [--runs 5] [--hog-runs 2]
                                     [--peer-runs 3] [--skip-sweep]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def dlas(*args: str) -> None:
    """`dlas ARGS`, its output to the log, failing loudly."""
    cmd = [sys.executable, "-m", "dlas.cli", *args, "--no-progress"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    log = Path(os.environ.get("DLAS_BENCH_LOG", "/tmp/dlas-measurement-bench.log"))
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}\n")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}); see {log}")


def run_ids(db: Path) -> set[str]:
    from dlas.results.store import ResultStore

    with ResultStore(db) as store:
        return {r["run_id"] for r in store.conn.execute("SELECT run_id FROM timing_runs")}


def sweep_run_ids(db: Path) -> set[str]:
    from dlas.results.store import ResultStore

    with ResultStore(db) as store:
        return {r["run_id"] for r in store.conn.execute(
            "SELECT run_id FROM timing_runs WHERE source = 'sweep'")}


def timing_groups(config: str) -> int:
    from dlas import registry
    from dlas.runner.timing_groups import group_key
    from dlas.sweep.config import load_config
    from dlas.sweep.grid import expand

    registry.load_plugins()
    return len({group_key(p) for p in expand(load_config(config)) if not p.blocked})


def timing_passes(config: str) -> int:
    from dlas.sweep.config import load_config

    return load_config(config).budgets.timing_passes


def remeasure_run_ids(db: Path, since: float) -> list[str]:
    from dlas.results.store import ResultStore

    with ResultStore(db) as store:
        return [r["run_id"] for r in store.conn.execute(
            "SELECT run_id, MIN(started_at) AS at FROM timing_runs WHERE source = "
            "'remeasure' AND started_at >= ? GROUP BY run_id ORDER BY at", (since,))]


def figures_by_run(db: Path, ids: set[str], ci_threshold: float = 0.10
                   ) -> dict[str, dict[str, dict[str, Any]]]:
    """point label -> run id -> this run's own figures (`latency_columns` of it alone)."""
    from dlas.results.latency import latency_columns
    from dlas.results.store import ResultStore

    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    with ResultStore(db) as store:
        for row in store.rows(status="ok"):
            label = f"{row.model} / {row.compression} / {row.algorithm} / {row.tuning}"
            for run in store.timing_runs(row.point_key, row.timing_key):
                if run.run_id in ids:
                    cols = latency_columns([run], ci_threshold)
                    out[label][run.run_id] = {
                        "median": cols["latency_median_ms"], "placement": cols["placement"],
                        "ci": (cols["latency_ci_high_ms"] - cols["latency_ci_low_ms"])
                        / cols["latency_median_ms"],
                        "noisy": bool(cols["noisy"]), "source": run.source}
    return out


def histories(db: Path, ids: set[str]) -> list[Any]:
    """Every ok point's timing runs among `ids`, as `dlas.results.reproducibility` reads
    them (the report's reproducibility section computes from the same)."""
    from dlas.results.reproducibility import TVM, TimedPoint
    from dlas.results.store import ResultStore

    out = []
    with ResultStore(db) as store:
        for row in store.rows(status="ok"):
            runs = [r for r in store.timing_runs(row.point_key, row.timing_key)
                    if r.run_id in ids]
            if runs:
                label = f"{row.model} / {row.compression} / {row.algorithm} / {row.tuning}"
                out.append(TimedPoint(label, row.backend or TVM, runs))
    return out


def block_figure(point: Any, block: set[str]) -> tuple[str, float] | None:
    """(placement, median) of `point` over its runs in `block`, pooled as its row pools
    its history (`latency_columns`); None when it has none there."""
    from dlas.results.latency import latency_columns

    mine = [r for r in point.runs if r.run_id in block]
    if not mine:
        return None
    cols = latency_columns(mine, ci_threshold=float("inf"))
    return str(cols["placement"]), float(cols["latency_median_ms"])


def invocation_agreement(points: list[Any], sweep: set[str], invocations: list[set[str]]
                         ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per runtime: (in-sweep vs alone, invocation to invocation), |log ratio| of the
    figures a row shows after one `dlas run` (all of its timing passes pooled): the
    sweep's own against the median of the remeasure invocations in the same placement,
    and every two remeasure invocations in the same placement."""
    vs_sweep: dict[str, list[float]] = defaultdict(list)
    between: dict[str, list[float]] = defaultdict(list)
    for point in points:
        alone = [f for f in (block_figure(point, inv) for inv in invocations) if f]
        between[point.runtime] += same_placement_ratios(alone)
        mine = block_figure(point, sweep)
        same = [m for pl, m in alone if mine and pl == mine[0]]
        if mine and same:
            vs_sweep[point.runtime] += log_ratios([(mine[1], float(np.median(same)))])
    return vs_sweep, between


def pooled_agreement(points: list[Any], runs: list[list[str]], k: int
                     ) -> dict[str, list[float]]:
    """Per runtime, |log ratio| between the figures of disjoint blocks of `k` consecutive
    remeasure runs, each block's figure pooled over its runs as a row pools its history
    (`latency_columns`), compared within one placement."""
    blocks = [set(itertools.chain(*runs[i:i + k])) for i in range(0, len(runs) - k + 1, k)]
    out: dict[str, list[float]] = defaultdict(list)
    for point in points:
        figs = [f for f in (block_figure(point, block) for block in blocks) if f]
        out[point.runtime] += same_placement_ratios(figs)
    return out


def same_placement_ratios(figs: list[tuple[str, float]]) -> list[float]:
    """|log ratio| of every two (placement, ms) figures taken in the same placement."""
    return log_ratios([(a, b) for (pa, a), (pb, b) in itertools.combinations(figs, 2)
                       if pa == pb])


def log_ratios(pairs: list[tuple[float, float]]) -> list[float]:
    from dlas.results.statistics import log_ratio

    return [log_ratio(a, b) for a, b in pairs if a > 0 and b > 0]


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{100 * np.median(values):.1f}% / {100 * max(values):.1f}% (n={len(values)})"


def agreement(figs: dict[str, dict[str, dict[str, Any]]], runs: list[str],
              placement: str | None = None) -> list[float]:
    """|log ratio| of every pair of `runs` per point, within one placement."""
    out: list[float] = []
    for per_run in figs.values():
        have = [per_run[r] for r in runs if r in per_run]
        for a, b in itertools.combinations(have, 2):
            if a["placement"] == b["placement"] and (placement in (None, a["placement"])):
                out += log_ratios([(a["median"], b["median"])])
    return out


def paired_agreement(figs: dict[str, dict[str, dict[str, Any]]], runs: list[str],
                     placement: str | None = None) -> list[float]:
    """How much a comparison moves from run to run: for every two variants timed in the
    same run (one model's group) and placement, |log| of (A/B in one run) over (A/B in
    another). What the report's comparisons decide on; a drift of the whole machine
    between runs cancels out of it."""
    by_run: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for label, per_run in figs.items():
        for run, rec in per_run.items():
            if run in runs:
                by_run[run][label] = rec
    out: list[float] = []
    for ra, rb in itertools.combinations(sorted(by_run), 2):
        a, b = by_run[ra], by_run[rb]
        for x, y in itertools.combinations(sorted(a.keys() & b.keys()), 2):
            states = {a[x]["placement"], a[y]["placement"], b[x]["placement"],
                      b[y]["placement"]}
            if len(states) == 1 and placement in (None, *states):
                out += log_ratios([(a[x]["median"] / a[y]["median"],
                                    b[x]["median"] / b[y]["median"])])
    return out


def sweep_vs_alone(figs: dict[str, dict[str, dict[str, Any]]], sweep_run: set[str],
                   alone: list[str]) -> list[float]:
    """Each of the sweep's own timing runs against the median of the alone runs in its
    placement."""
    out: list[float] = []
    for per_run in figs.values():
        for mine in (per_run[r] for r in sweep_run if r in per_run):
            same = [per_run[r]["median"] for r in alone
                    if r in per_run and per_run[r]["placement"] == mine["placement"]]
            if same:
                out += log_ratios([(mine["median"], float(np.median(same)))])
    return out


# -- the peer: the previous code path ---------------------------------------------------


def peer_main(args: argparse.Namespace) -> None:
    """Time every measured point back to back in this process, as dlas did before the
    timing worker existed; print one JSON line per point."""
    from dlas.targets.host import allowed_cpus

    allowed_cpus()
    from dlas import registry
    from dlas.measure.placement import PlacementProbe
    from dlas.runner.cache import Cache
    from dlas.runner.executor import StageExecutor
    from dlas.runner.timing_worker import _EventConsole
    from dlas.runner.workspace import StageTally
    from dlas.stages import BASELINE, IMPORT, MEASURE, stage_keys
    from dlas.stages.base import Inputs, StageEnv
    from dlas.stages.facts import MeasureFacts
    from dlas.stages.timed import TimingContext
    from dlas.sweep.config import load_config
    from dlas.sweep.grid import expand

    if args.train_first:  # what the sweep's process did before it timed
        import torch

        torch.set_num_threads(len(allowed_cpus()))
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(),
                                  torch.nn.Conv2d(32, 32, 3), torch.nn.Flatten(),
                                  torch.nn.LazyLinear(10))
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            loss = net(torch.randn(64, 3, 32, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    registry.load_plugins()
    ws = Path(args.workspace)
    cache = Cache(ws / "cache")
    env = StageEnv(ws, _EventConsole(lambda **e: None), progress=False)
    ex = StageExecutor(cache, env, StageTally())
    context = TimingContext(cpus=None)
    probe = PlacementProbe(allowed_cpus()[:2])
    for point in expand(load_config(args.config)):
        if point.blocked:
            continue
        keys = stage_keys(point)
        stage = BASELINE if point.is_baseline else MEASURE
        if not cache.has(stage.parent or "", keys[stage.parent or ""]):
            continue
        inputs = Inputs(stage, lambda s, p=point, k=keys: ex.output(p, k, s),
                        lambda s, p=point, k=keys: ex.facts(p, k, s))
        subject = stage.subject(point, inputs, context, Path(tempfile.mkdtemp()))
        if isinstance(subject, MeasureFacts):
            continue
        subject.x = inputs[IMPORT].inputs[:1]
        before = probe.read()
        samples = subject.time(point.budgets.measure_repeat, 1)
        after = probe.read()
        label = (f"{point.models.label} / {point.compression.label} / "
                 f"{point.algorithms.label} / {point.tuning.label}")
        state = before.state if before.state == after.state else "mixed"
        print(json.dumps({"label": label, "median": float(np.median(samples)) * 1e3,
                          "placement": state}), flush=True)
        subject.close()
    context.close()


def peer_run(args: argparse.Namespace, train_first: bool) -> dict[str, dict[str, Any]]:
    cmd = [sys.executable, __file__, "peer", "--workspace", str(args.workspace),
           "--config", args.config, *(["--train-first"] if train_first else [])]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
    out = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            out[rec["label"]] = rec
    return out


# -- main ----------------------------------------------------------------------------------


def hog_on_one_core() -> subprocess.Popen:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    return subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                             "while True: pass"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    peer = sub.add_parser("peer")
    peer.add_argument("--workspace", required=True)
    peer.add_argument("--config", required=True)
    peer.add_argument("--train-first", action="store_true")
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/dlas-bench-measurement"))
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hog-runs", type=int, default=2)
    parser.add_argument("--peer-runs", type=int, default=3)
    parser.add_argument("--independent", type=int, default=2,
                        help="independent invocations after the rest (0: none)")
    parser.add_argument("--skip-sweep", action="store_true",
                        help="the workspace already holds the sweep")
    parser.add_argument("--since", type=float, default=None,
                        help="analyse only: the remeasure runs started after this Unix time "
                             "(the first --runs of them idle, the rest with the hog) instead "
                             "of taking new ones; the peer is still run")
    args = parser.parse_args()
    if args.command == "peer":
        peer_main(args)
        return

    db = args.workspace / "results.db"
    ws = ["--workspace", str(args.workspace)]
    t0 = time.time()
    if not args.skip_sweep and args.since is None:  # --since only analyses: it runs nothing
        dlas("run", args.config, *ws)
    sweep_ids = sweep_run_ids(db)  # the sweep's own timing runs (timed inside the sweep)
    alone: list[str] = []
    invocations: list[set[str]] = []  # the run ids of each `dlas run --remeasure`
    if args.since is not None:
        ordered = remeasure_run_ids(db, args.since)
        # one run id per model's timing group and timing pass
        per_run = timing_groups(args.config) * timing_passes(args.config)
        alone = ordered[: per_run * args.runs]
        invocations = [set(alone[i:i + per_run]) for i in range(0, len(alone), per_run)]
        hog_ids_given = ordered[per_run * args.runs:]
        args.runs, args.hog_runs = 0, 0
    for _ in range(args.runs):
        before = run_ids(db)
        dlas("run", args.config, *ws, "--remeasure")
        invocations.append(run_ids(db) - before)
        alone += sorted(invocations[-1])
    hog_ids: list[str] = []
    if args.hog_runs:
        hog = hog_on_one_core()
        try:
            time.sleep(1)
            for _ in range(args.hog_runs):
                before = run_ids(db)
                dlas("run", args.config, *ws, "--remeasure")
                hog_ids += sorted(run_ids(db) - before)
        finally:
            hog.kill()
            hog.wait()
    if args.since is not None:
        hog_ids = hog_ids_given
    peers = {"fresh": [peer_run(args, False) for _ in range(args.peer_runs)],
             "after training": [peer_run(args, True) for _ in range(args.peer_runs)]}

    figs = figures_by_run(db, set(alone) | sweep_ids | set(hog_ids))
    # a run id is shared by the variants of one model timed together: group run ids per
    # "timing run of the sweep" by index within each phase
    alone_runs = sorted(set(alone))
    cpu = platform.processor() or platform.machine()
    try:
        from dlas.targets.host import detect_host_cpu

        cpu = f"{detect_host_cpu().get('model')} ({detect_host_cpu().get('mcpu')})"
    except Exception:  # noqa: BLE001 - only for the header
        pass
    print(f"\nmachine: {cpu}, {len(os.sched_getaffinity(0))} CPUs; "
          f"{len(figs)} points; {time.time() - t0:.0f} s")
    placements = defaultdict(int)
    for per_run in figs.values():
        for rec in per_run.values():
            placements[rec["placement"]] += 1
    print("figures by placement:", dict(placements))

    def row(name: str, values: list[float]) -> None:
        print(f"  {name:<46} {summary(values)}")

    print("\n|log ratio| median / worst            (within one placement)")
    row("single runs: in-sweep vs alone (median)", sweep_vs_alone(figs, sweep_ids, alone_runs))
    row("single runs: run to run, alone", agreement(figs, alone_runs))
    for state in ("near", "far"):
        row(f"dlas: run to run, alone, {state} only", agreement(figs, alone_runs, state))
    row("dlas: run to run, A/B ratio of two variants", paired_agreement(figs, alone_runs))
    for name, runs in peers.items():
        pairs, mixed = [], 0
        for a, b in itertools.combinations(runs, 2):
            for label in a.keys() & b.keys():
                if a[label]["placement"] == b[label]["placement"] != "mixed":
                    pairs.append((a[label]["median"], b[label]["median"]))
                else:
                    mixed += 1
        row(f"peer ({name}): run to run, same placement", log_ratios(pairs))
        allpairs = [(a[lb]["median"], b[lb]["median"])
                    for a, b in itertools.combinations(runs, 2) for lb in a.keys() & b.keys()]
        row(f"peer ({name}): run to run, any placement", log_ratios(allpairs))
    cross = []
    for fresh, trained in zip(peers["fresh"], peers["after training"], strict=False):
        for label in fresh.keys() & trained.keys():
            if fresh[label]["placement"] == trained[label]["placement"] != "mixed":
                cross.append((fresh[label]["median"], trained[label]["median"]))
    row("peer: after training vs fresh, same placement", log_ratios(cross))

    ci_idle = [rec["ci"] for per in figs.values() for r, rec in per.items() if r in alone]
    ci_hog = [rec["ci"] for per in figs.values() for r, rec in per.items() if r in hog_ids]
    noisy_idle = [rec["noisy"] for per in figs.values() for r, rec in per.items() if r in alone]
    noisy_hog = [rec["noisy"] for per in figs.values() for r, rec in per.items()
                 if r in hog_ids]
    from dlas.results.reproducibility import run_agreement

    points = histories(db, set(alone_runs) | sweep_ids)
    vs_sweep, between = invocation_agreement(points, sweep_ids, invocations)
    print(f"\nfigures as a row shows them after one `dlas run` ({timing_passes(args.config)} "
          "timing pass(es) pooled), |log ratio| median / worst, within one placement")
    row("in-sweep vs alone, all runtimes", list(itertools.chain(*vs_sweep.values())))
    for runtime, values in sorted(vs_sweep.items()):
        row(f"  {runtime}", values)
    row("alone, invocation to invocation, all", list(itertools.chain(*between.values())))
    for runtime, values in sorted(between.items()):
        row(f"  {runtime}", values)

    print("\nsingle timing runs, run to run, alone, by runtime (dlas.results.reproducibility, "
          "what the report shows)")
    alone_ids = set(alone_runs)  # the same histories without the sweep's own runs
    points = [replace(p, runs=[r for r in p.runs if r.run_id in alone_ids]) for p in points]
    points = [p for p in points if p.runs]
    for agreed in run_agreement(points):
        print(f"  {agreed.describe()}")
    # one timing run per model group, in start order
    per_pass = max(1, timing_groups(args.config))
    ordered = [r for r in remeasure_run_ids(db, 0.0) if r in set(alone_runs)]
    passes = [ordered[i:i + per_pass] for i in range(0, len(ordered), per_pass)]
    print("\nfigures pooled over k consecutive timing passes, block to block, by runtime "
          "(|log ratio| median / worst)")
    for k in (1, 2, 3):
        if len(passes) >= 2 * k:
            for runtime, values in sorted(pooled_agreement(points, passes, k).items()):
                row(f"k={k} {runtime}", values)

    print("\n95% CI width (fraction of the median), median / worst")
    row("idle", ci_idle)
    row("with a CPU hog on one core", ci_hog)
    print("\nnoisy flag")
    print(f"  idle: {sum(noisy_idle)} of {len(noisy_idle)} figures")
    print(f"  with a CPU hog on one core: {sum(noisy_hog)} of {len(noisy_hog)} figures")
    print("\nper point, alone runs (median ms, placement):")
    for label, per_run in sorted(figs.items()):
        cells = [f"{per_run[r]['median']:.3f}{per_run[r]['placement'][0]}"
                 for r in alone_runs if r in per_run]
        print(f"  {label[:70]:<70} {' '.join(cells)}")
    if args.independent > 0:
        independent_invocations(args)


def independent_invocations(args: argparse.Namespace) -> None:
    """`benchmarks/independent.py` on copies of this workspace (see the module doc)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import independent

    out = args.workspace.parent / f"{args.workspace.name}-independent"
    out.mkdir(parents=True, exist_ok=True)
    walls, done = [], []
    for i in range(args.independent):
        ws = out / f"invocation{i + 1}"
        independent.fresh_copy(args.workspace, ws)
        walls.append(independent.invoke(args.config, ws, None))
        done.append(independent.load(ws))
    print("\nindependent invocations (own workspaces, no shared timing history):")
    independent.report(done, walls)


if __name__ == "__main__":
    main()
