"""Numbers that hold across runs, measured as a user meets them: independent invocations.

Each invocation is `dlas run CONFIG --passes P` in its own copy of a finished workspace,
with the results database, the timing entries and the verification records removed
(`cache/measure`, `cache/baseline`, `cache/verified`): it shares the trained, compressed
and compiled artifacts, so only timing runs, and nothing of the others' timing history.
With `--fresh` each invocation is the whole sweep in an empty workspace, as two users meet
it: training, compression, compiles and tuning searches are each invocation's own, so a
stage that does not reproduce (a tuning search drawn by thread scheduling, as MetaSchedule's
was: docs/tuning.md, "One seed, one search") shows as rows that disagree.
They run one after another, minutes apart, with the default budgets unless `--passes`
says otherwise (`--passes 1`: one 10-round pass, the default before 3 short ones). Printed
per runtime (TVM, ONNX Runtime, PyTorch), comparing each invocation with the next within one
vCPU placement (|log ratio| median / worst) and the coverage of each kind of interval
(the share of rows whose next invocation's median fell inside this invocation's):

- "1 pass": each point's first timing run alone (with `--passes 1`, the rows as
  written), with its within-run 95% CI and its next-run range;
- "P passes": the rows as written (every pass pooled);
- pass to pass within one invocation (minutes apart, fresh workers, same process),
  against invocation to invocation: which of the two the drift comes with;
- the shift common to a runtime's rows between two invocations, and what is left after
  removing it: what a per-runtime control workload could correct at best;
- the next-run ranges as the rows wrote them: their half-widths per runtime, and how many
  rows their own chunks' spread widened past the runtime's drift (`dlas.results.drift`);
- a chunk's first samples against its last: what the warm-up calls leave of the slow
  first calls after the other variants' chunks;
- the cost: wall time per invocation (only timing runs: everything else is cached).

Every figure is the row's own rule (`dlas.results.latency`, `dlas.results.reproducibility`).

`--against CHECKOUT` measures a change as the benchmarks' rule asks, against the previous
code path in the same run: its invocations alternate with this checkout's (this one, then
the other, and again), each set reported on its own, with the ratio of their wall times.
On hosts whose state moves over minutes (the Zen 4 of docs/timing.md), sets taken an hour
apart say more about the hour than about the code.

    python benchmarks/independent.py --from WORKSPACE [--config C] [--invocations 4]
                                     [--passes 3] [--out DIR] [--against CHECKOUT]
    python benchmarks/independent.py --fresh [--config C] [--invocations 4] [...]
    python benchmarks/independent.py --analyse DIR [DIR ...] [--rounds-per-pass K]
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dlas.measure.record import TimingRun

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: What an independent invocation must not inherit: the results and the timing entries.
NOT_COPIED = ("results.db", "results.db-wal", "results.db-shm", "report")
TIMING_ENTRIES = ("measure", "baseline", "verified")


@dataclass(frozen=True)
class Figure:
    """One point's figure in one invocation: median, its within-run CI and its range."""

    runtime: str
    placement: str
    median: float
    ci: tuple[float, float]
    next_run: tuple[float, float]
    #: The point, short: model / compression / algorithm / tuning (option names only).
    label: str = ""


@dataclass
class Invocation:
    path: Path
    started: float
    rows: dict[str, Figure]        # the row: every pass pooled
    #: the row's figures in every placement it was timed in (`latency_by_placement`)
    placed: dict[str, dict[str, Figure]]
    first: dict[str, Figure]       # the first timing run alone (the default budgets)
    passes: dict[str, list[tuple[str, float]]]  # per point: (placement, median) per run
    #: per point: (runtime, its next-run half-width, whether its own chunks' spread set it)
    widths: dict[str, tuple[str, float, bool]] = field(default_factory=dict)


def fresh_copy(source: Path, dest: Path) -> None:
    """`source` without its results and timing entries (see the module doc)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*NOT_COPIED))
    for name in TIMING_ENTRIES:
        shutil.rmtree(dest / "cache" / name, ignore_errors=True)


def empty(dest: Path) -> None:
    """An empty workspace at `dest` (`--fresh`): the sweep computes every stage."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)


def invoke(config: str, workspace: Path, passes: int | None, root: Path = ROOT) -> float:
    """Run the sweep in `workspace` with the dlas of checkout `root`; its wall time (s)."""
    cmd = [sys.executable, "-m", "dlas.cli", "run", config, "--workspace", str(workspace),
           "--no-progress", *(["--passes", str(passes)] if passes else [])]
    t0 = time.time()
    with (workspace.parent / f"{workspace.name}.log").open("w") as log:
        done = subprocess.run(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}); see {log.name}")
    return time.time() - t0


def shortened(run: TimingRun, rounds: int | None) -> TimingRun:
    """`run` as if it had stopped after its first `rounds` rounds (None: as taken): what
    passes of fewer rounds each would have given (`--rounds-per-pass`)."""
    if rounds is None:
        return run
    kept = sorted(run.rounds, key=lambda r: r.index)[:rounds]
    policy = {**run.policy, "min_rounds": min(rounds, int(run.policy.get("min_rounds", 10)))}
    return run.model_copy(update={"rounds": kept, "policy": policy})


def load(workspace: Path, rounds: int | None = None) -> Invocation:
    from dlas.results.drift import Drift, next_run_range, widened
    from dlas.results.latency import latency_columns
    from dlas.results.store import ResultStore

    rows, first, passes, placed, widths = {}, {}, {}, {}, {}
    started = math.inf
    with ResultStore(workspace / "results.db") as store:
        for row in store.rows(status="ok"):
            runs = sorted((shortened(r, rounds)
                           for r in store.timing_runs(row.point_key, row.timing_key)
                           if any(x.samples_ms for x in r.rounds)), key=lambda r: r.started_at)
            if not runs or row.latency_median_ms is None:
                continue
            # each run's own figure, by the row's rule (as the report's reproducibility)
            figs = [latency_columns([r], ci_threshold=math.inf) for r in runs]
            runtime = row.backend or "tvm"
            # option names only, but the algorithm whole: its params (a layout) make it
            # a variant of its own
            label = " / ".join([(row.model or "-").split("(")[0],
                                (row.compression or "-").split("(")[0], row.algorithm or "-",
                                (row.tuning or "-").split("(")[0]])
            drift = Drift(runtime, row.next_run_drift or 0.0, 0)
            widths[row.point_key] = (runtime, drift.half_width, widened(row.next_run_basis))
            pooled = latency_columns(runs, ci_threshold=math.inf)  # the row, by its rule
            ci = (pooled["latency_ci_low_ms"], pooled["latency_ci_high_ms"])
            rows[row.point_key] = Figure(
                runtime, str(pooled["placement"]), pooled["latency_median_ms"], ci,
                next_run_range(pooled["latency_median_ms"], *ci, drift), label)
            placed[row.point_key] = {
                state: Figure(runtime, state, fig["median_ms"],
                              (fig["ci_low_ms"], fig["ci_high_ms"]),
                              next_run_range(fig["median_ms"], fig["ci_low_ms"],
                                             fig["ci_high_ms"], drift))
                for state, fig in (pooled["latency_by_placement"] or {}).items()}
            one = figs[0]
            ci = (one["latency_ci_low_ms"], one["latency_ci_high_ms"])
            first[row.point_key] = Figure(runtime, str(one["placement"]),
                                          one["latency_median_ms"], ci,
                                          next_run_range(one["latency_median_ms"], *ci, drift))
            passes[row.point_key] = [(str(f["placement"]), f["latency_median_ms"])
                                     for f in figs]
            started = min(started, runs[0].started_at)
    return Invocation(workspace, started, rows, placed, first, passes, widths)


def common_placement(inv: Invocation, other: Invocation) -> dict[str, Figure]:
    """`inv`'s figure of each point in the placement it shares with `other`'s (near
    first), as the report's comparisons pick one: rows compared where they can be."""
    out = {}
    for key, mine in inv.placed.items():
        theirs = other.placed.get(key, {})
        shared = [s for s in ("single", "near", "far") if s in mine and s in theirs]
        if shared:
            out[key] = mine[shared[0]]
    return out


def pct(x: float) -> str:
    return f"{100 * math.expm1(x):.1f}%" if math.isfinite(x) else "-"


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{pct(float(np.median(values)))} / {pct(max(values))} (n={len(values)})"


def figures_of(inv: Invocation, other: Invocation, which: str) -> dict[str, Figure]:
    """The figures of `inv` to compare with `other`'s: 'first', 'rows' or 'placed'."""
    return common_placement(inv, other) if which == "placed" else getattr(inv, which)


def agreement(invocations: list[Invocation], which: str
              ) -> dict[str, dict[str, list[float]]]:
    """Per runtime: |log ratio| to the next invocation, and whether it fell inside this
    invocation's CI and next-run range (1/0), over points in the same placement."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for a, b in zip(invocations, invocations[1:], strict=False):
        fa, fb = figures_of(a, b, which), figures_of(b, a, which)
        for key in fa.keys() & fb.keys():
            x, y = fa[key], fb[key]
            if x.placement != y.placement:
                out[x.runtime]["placement changed"].append(1.0)
                continue
            out[x.runtime]["log ratio"].append(abs(math.log(y.median / x.median)))
            out[x.runtime]["in CI"].append(float(x.ci[0] <= y.median <= x.ci[1]))
            out[x.runtime]["in range"].append(float(x.next_run[0] <= y.median <= x.next_run[1]))
    return out


def worst_pairs(invocations: list[Invocation], which: str
                ) -> dict[str, tuple[float, str, str]]:
    """Per runtime: its largest |log ratio| between consecutive invocations (same
    placement), the point's label (from the rows) and the two figures, to say which row
    sets the worst case."""
    out: dict[str, tuple[float, str, str]] = {}
    for n, (a, b) in enumerate(zip(invocations, invocations[1:], strict=False), start=1):
        fa, fb = figures_of(a, b, which), figures_of(b, a, which)
        for key in fa.keys() & fb.keys():
            x, y = fa[key], fb[key]
            if x.placement != y.placement:
                continue
            ratio = abs(math.log(y.median / x.median))
            if ratio > out.get(x.runtime, (-1.0, "", ""))[0]:
                out[x.runtime] = (ratio, a.rows[key].label or key,
                                  f"{x.median:.3f} -> {y.median:.3f} ms, {x.placement}, "
                                  f"invocations {n} -> {n + 1}")
    return out


def within(invocations: list[Invocation]) -> dict[str, list[float]]:
    """Per runtime: |log ratio| between consecutive passes of one invocation."""
    out: dict[str, list[float]] = defaultdict(list)
    for inv in invocations:
        for key, figs in inv.passes.items():
            runtime = inv.rows[key].runtime
            out[runtime] += [abs(math.log(b / a)) for (pa, a), (pb, b)
                             in zip(figs, figs[1:], strict=False) if pa == pb]
    return out


def common_shift(invocations: list[Invocation], which: str
                 ) -> dict[str, tuple[list[float], list[float]]]:
    """Per runtime: (the median signed log ratio of its rows between two invocations,
    what is left of each row's |log ratio| after removing it)."""
    out: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for a, b in zip(invocations, invocations[1:], strict=False):
        fa, fb = figures_of(a, b, which), figures_of(b, a, which)
        per: dict[tuple[str, str], list[float]] = defaultdict(list)
        for key in fa.keys() & fb.keys():
            if fa[key].placement == fb[key].placement:
                per[(fa[key].runtime, fa[key].placement)].append(
                    math.log(fb[key].median / fa[key].median))
        for (runtime, _), values in per.items():
            shift = float(np.median(values))
            out[runtime][0].append(abs(shift))
            out[runtime][1].extend(abs(v - shift) for v in values)
    return out


def first_samples(invocations: list[Invocation], count: int = 6
                  ) -> dict[str, np.ndarray]:
    """Per runtime, each stored chunk's first `count` samples over the median of its last
    three (chunks of at least `count` samples): whether a chunk's warm-up calls
    (`dlas.measure.stopping.WARMUP_S`) let its first samples run at the chunk's speed."""
    from dlas.results.store import ResultStore

    ratios: dict[str, list[list[float]]] = defaultdict(list)
    for inv in invocations:
        with ResultStore(inv.path / "results.db") as store:
            for row in store.rows(status="ok"):
                for run in store.timing_runs(row.point_key, row.timing_key):
                    for r in run.rounds:
                        if len(r.samples_ms) >= count:
                            tail = float(np.median(r.samples_ms[-3:]))
                            ratios[row.backend or "tvm"].append(
                                [v / tail for v in r.samples_ms[:count]])
    return {runtime: np.array(v) for runtime, v in ratios.items()}


def report(invocations: list[Invocation], walls: list[float] | None = None,
           fresh: bool = False) -> None:
    from dlas.results.drift_record import this_machine

    invocations = sorted(invocations, key=lambda i: i.started)
    print(f"\nmachine: {this_machine()}; {len(invocations)} independent invocations: "
          + ", ".join(i.path.name for i in invocations))
    npasses = max((len(v) for i in invocations for v in i.passes.values()), default=1)
    runtimes = sorted({f.runtime for i in invocations for f in i.rows.values()},
                      key=lambda r: (r != "tvm", r))
    for which, title in (("first", "1 pass (each point's first run alone)"),
                         ("rows", f"{npasses} passes pooled (the rows as written)"),
                         ("placed", f"{npasses} passes pooled, in the placement both "
                                    "rows have (as comparisons pick it)")):
        print(f"\n{title}: invocation to the next, same placement")
        print(f"  {'runtime':<12} {'|log ratio| median / worst':<30} {'in CI':>7} "
              f"{'in next-run range':>18} {'placement changed':>18}")
        agreed = agreement(invocations, which)
        for runtime in runtimes:
            got = agreed.get(runtime, {})
            lr, ci, rng = got.get("log ratio", []), got.get("in CI", []), got.get("in range", [])
            moved = len(got.get("placement changed", []))
            print(f"  {runtime:<12} {summary(lr):<30} "
                  f"{100 * np.mean(ci) if ci else math.nan:>6.0f}% "
                  f"{100 * np.mean(rng) if rng else math.nan:>17.0f}% "
                  f"{moved:>10} of {moved + len(lr)}")
        shifts = common_shift(invocations, which)
        for runtime in runtimes:
            shift, rest = shifts.get(runtime, ([], []))
            print(f"    {runtime}: shift common to its rows {summary(shift)}; "
                  f"left after removing it {summary(rest)}")
        for runtime, (ratio, label, figures) in sorted(
                worst_pairs(invocations, which).items(), key=lambda kv: kv[0] != "tvm"):
            print(f"    {runtime}: worst {pct(ratio)}, {label} ({figures})")
    print("\nnext-run ranges as the rows wrote them: half-width median / 90th percentile, "
          "and the rows their own chunks' spread widened past the runtime's drift")
    for runtime in runtimes:
        mine = [(w, own) for i in invocations for rt, w, own in i.widths.values()
                if rt == runtime]
        if mine:
            half = [w for w, _ in mine]
            print(f"  {runtime:<12} {pct(float(np.median(half)))} / "
                  f"{pct(float(np.percentile(half, 90)))}; widened {sum(o for _, o in mine)} "
                  f"of {len(mine)}")
    print("\npass to pass within one invocation (single runs, same placement)")
    for runtime, values in sorted(within(invocations).items(), key=lambda kv: kv[0] != "tvm"):
        print(f"  {runtime:<12} {summary(values)}")
    print("\na chunk's first samples over the median of its last three: median (interquartile "
          "range) over chunks")
    for runtime, ratios in sorted(first_samples(invocations).items(),
                                  key=lambda kv: kv[0] != "tvm"):
        q1, med, q3 = np.percentile(ratios, [25, 50, 75], axis=0)
        print(f"  {runtime:<12} " + "  ".join(f"{m:.2f} ({a:.2f}-{b:.2f})"
                                            for m, a, b in zip(med, q1, q3, strict=True))
              + f"  ({len(ratios)} chunks)")
    if walls:
        what = "the whole sweep" if fresh else "timing only; all else cached"
        print(f"\nwall time per invocation ({what}): "
              f"{', '.join(f'{w:.0f} s' for w in walls)}; median {np.median(walls):.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", type=Path,
                        help="a finished workspace of CONFIG (its artifacts are copied)")
    parser.add_argument("--fresh", action="store_true",
                        help="each invocation the whole sweep in an empty workspace, nothing "
                             "shared (instead of --from)")
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--invocations", type=int, default=4)
    parser.add_argument("--passes", type=int, default=None,
                        help="timing passes per invocation (default: the config's)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/dlas-bench-independent"))
    parser.add_argument("--analyse", nargs="+", type=Path, default=None,
                        help="only analyse these workspaces (earlier invocations)")
    parser.add_argument("--against", type=Path, default=None,
                        help="another checkout (the previous code path, e.g. a git worktree): "
                             "its invocations alternate with this one's, each set reported "
                             "on its own, so both meet the same hour of the machine")
    parser.add_argument("--rounds-per-pass", type=int, default=None,
                        help="with --analyse: each timing run cut to its first K rounds, "
                             "as if passes of K rounds had been taken")
    args = parser.parse_args()
    if args.analyse:
        report([load(p, args.rounds_per_pass) for p in args.analyse])
        return
    if (args.source is None) == (not args.fresh):
        parser.error("one of --from WORKSPACE (a finished sweep of --config) and --fresh, "
                     "or --analyse DIRS")
    args.out.mkdir(parents=True, exist_ok=True)
    sides = {"invocation": ROOT, **({"against": args.against.resolve()} if args.against else {})}
    walls: dict[str, list[float]] = {name: [] for name in sides}
    done: dict[str, list[Invocation]] = {name: [] for name in sides}
    for i in range(args.invocations):
        for name, root in sides.items():  # alternated: a spell of the machine hits both
            ws = args.out / f"{name}{i + 1}"
            if args.fresh:
                empty(ws)
            else:
                fresh_copy(args.source, ws)
            walls[name].append(invoke(args.config, ws, args.passes, root))
            done[name].append(load(ws))
            print(f"{name} {i + 1} ({root}): {walls[name][-1]:.0f} s", flush=True)
    for name, root in sides.items():
        if args.against:
            print(f"\n=== {root}")
        report(done[name], walls[name], fresh=args.fresh)
    if args.against:
        ratio = np.median(walls["invocation"]) / np.median(walls["against"])
        print(f"\nwall time, this checkout over {args.against}: x{ratio:.2f} (medians)")


if __name__ == "__main__":
    main()
