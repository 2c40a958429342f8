"""Does the cache-contention reading see what slows a one-thread inference on each vCPU?

On the 2-vCPU cloud VMs dlas runs on, a one-thread ONNX Runtime inference sometimes runs
25-45% slower on one vCPU for seconds to a minute while the placement probe reads
"near" and the clock does not move (docs/timing.md). `dlas.measure.rounds` leaves out
chunks whose cache reading (`dlas.measure.placement.cache_stream_ns`) is above
`CONTENTION_FACTOR` x the CPU's usual one. This probe checks that rule on this machine:
for DURATION seconds it alternates, on each CPU, a cache reading and a median of 20
one-thread ONNX Runtime calls, and prints, per CPU, how often the rule fires during the
slow spells (inference above 1.15x its lower quartile) and outside them, for several
factors, and the correlation of the two.

    python benchmarks/contention.py [--seconds 180] [--onnx MODEL.onnx]
    python benchmarks/contention.py --from-db WORKSPACE/results.db [--source remeasure]

Without --onnx it exports a small MobileNetV2-like network (depthwise and pointwise convs,
about 2 MB of weights) with PyTorch.

`--from-db` replays the rules on the chunks a workspace's timing runs stored (each chunk's
cache readings and samples): per rule, the share of chunks it leaves out, how much slower
they ran than the variant's other chunks in the same placement (median ratio), and how many
of the left-out and of the kept ones ran 10% or more slower. A rule worth its cost leaves
out few chunks that ran much slower; one that leaves out many that ran as fast throws away
rounds (and makes rows noisy) for nothing. Then, per variant and placement, its chunks with
every CPU's reading at its usual level against those with one above it: which kernels a
busy SMT neighbour slows, and by how much (on a Zen 4, 2026-11-30: ResNet18-w0.5's short
two-thread kernels and baselines 1.1-1.3x, the 4.4 ms naive convs 1.00-1.05x).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def small_model(path: Path) -> None:
    import torch
    from torch import nn

    def block(c_in: int, c_out: int, stride: int) -> nn.Module:
        mid = c_in * 6
        return nn.Sequential(nn.Conv2d(c_in, mid, 1), nn.ReLU6(),
                             nn.Conv2d(mid, mid, 3, stride, 1, groups=mid), nn.ReLU6(),
                             nn.Conv2d(mid, c_out, 1))

    net = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), *[block(c, d, s) for c, d, s in
                        [(16, 24, 1), (24, 32, 2), (32, 64, 2), (64, 96, 1), (96, 160, 2)]],
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(160, 10)).eval()
    torch.onnx.export(net, (torch.randn(1, 3, 32, 32),), str(path), dynamo=False)


def stored_chunks(db: Path, source: str) -> list[dict]:
    """Every stored chunk with cache readings: its run, point, placement state (from its
    round trips), readings before it per CPU and median sample."""
    import json
    import sqlite3

    from dlas.measure.placement import classify

    out = []
    with sqlite3.connect(db) as con:
        query = "select run_id, point_key, record from timing_runs where source like ?"
        for run_id, key, record in con.execute(query, (source,)):
            for rd in json.loads(record)["rounds"]:
                trips = [x for x in rd.get("round_trip_ns", []) if x is not None]
                before = (rd.get("cache_ns") or [[]])[0]
                if not rd["samples_ms"] or not before or None in before or not trips:
                    continue
                out.append({"run": run_id, "key": key, "state": classify(max(trips)),
                            "before": before, "ms": float(np.median(rd["samples_ms"]))})
    return out


def confirmed_runs(runs: dict[str, list[dict]], limit: dict[str, list[float]]) -> set[str]:
    """The runs whose limit-flagged chunks ran slower than their variants' others in the
    same placement: the ones where dlas keeps the flags (`dlas.measure.contention.confirm`,
    the rule itself, which also lifts a run's flags when every chunk is flagged)."""
    from types import SimpleNamespace

    from dlas.measure.contention import confirm

    keep = set()
    for run, members in runs.items():
        flags = [any(v > lim for v, lim in zip(c["before"], limit[run], strict=True))
                 for c in members]
        pairs = [(c["key"], SimpleNamespace(state=c["state"], samples_s=[c["ms"]]))
                 for c in members]
        _, ignored, _ = confirm(pairs, flags, flagged_by="", every="every chunk")  # type: ignore[arg-type]
        if ignored is None:
            keep.add(run)
    return keep


def replay(db: Path, source: str) -> None:
    from dlas.measure.contention import CONTENTION_FACTOR, contention_limit

    chunks = stored_chunks(db, source)
    runs: dict[str, list[dict]] = {}
    for c in chunks:
        runs.setdefault(c["run"], []).append(c)
    usual, limit = {}, {}
    for run, members in runs.items():
        readings = np.array([c["before"] for c in members])
        usual[run] = np.percentile(readings, 10, axis=0)
        limit[run] = [contention_limit(float(u), readings[:, i])
                      for i, u in enumerate(usual[run])]
    confirmed = confirmed_runs(runs, limit)
    spread = [float(np.max(np.median(np.array([c["before"] for c in m]), axis=0) / usual[r]))
              for r, m in runs.items()]
    print(f"{db}: {len(chunks)} chunks in {len(runs)} timing runs ({source}); cache readings' "
          f"median over their 10th percentile: {np.median(spread):.3f} (worst run "
          f"{max(spread):.3f})")
    rules = {f"{CONTENTION_FACTOR:.1f} x usual (before)":
             lambda c: any(v > CONTENTION_FACTOR * u
                           for v, u in zip(c["before"], usual[c["run"]], strict=True)),
             "max(that, median + 4 sigma)":
             lambda c: any(v > lim
                           for v, lim in zip(c["before"], limit[c["run"]], strict=True)),
             "dlas: that, where flagged ran slower":
             lambda c: c["run"] in confirmed and any(
                 v > lim for v, lim in zip(c["before"], limit[c["run"]], strict=True)),
             "none": lambda c: False}
    groups: dict[tuple, list[dict]] = {}
    for c in chunks:
        groups.setdefault((c["run"], c["key"], c["state"]), []).append(c)
    for name, rule in rules.items():
        dropped, kept = [], []
        for members in groups.values():
            if len(members) < 3:
                continue
            base = float(np.median([c["ms"] for c in members]))
            for c in members:
                (dropped if rule(c) else kept).append(c["ms"] / base)
        d, k = np.array(dropped), np.array(kept)
        n = len(d) + len(k)

        def med(a: np.ndarray) -> str:
            return f"{np.median(a):.3f}" if len(a) else "-"

        def slow(a: np.ndarray) -> str:
            return f"{(a > 1.10).mean():.0%}" if len(a) else "-"

        print(f"  {name:<36} leaves out {len(d)}/{n} ({len(d) / max(n, 1):.0%}); "
              f"median time left out {med(d)}, kept {med(k)}; 10% slower: left out "
              f"{slow(d)}, kept {slow(k)}")
    by_variant(db, chunks, usual)


def variant_names(db: Path) -> dict[str, str]:
    """'resnet18 / weight_pruning / spatial_pack_csr / none' per point key."""
    import sqlite3

    with sqlite3.connect(db) as con:
        rows = con.execute("select point_key, model, compression, algorithm, tuning "
                           "from points").fetchall()
    return {key: " / ".join(part.split("(")[0] if i < 2 else part[:24]
                            for i, part in enumerate(parts))
            for key, *parts in rows}


def by_variant(db: Path, chunks: list[dict], usual: dict[str, np.ndarray]) -> None:
    """Per variant and placement: its chunks' median time with every CPU's cache reading
    at most `CONTENTION_FACTOR` x that CPU's usual one ("quiet": no SMT neighbour working
    on a measurement CPU's core) against with one above it ("busy"), each within its own
    timing runs (time over the run's median for the variant, so that runs of different
    invocations pool). A variant a busy neighbour slows reads by the share of its chunks
    taken so; one it does not slow shows ~1.00 whatever the rule flags."""
    from dlas.measure.contention import CONTENTION_FACTOR

    names = variant_names(db)
    runs: dict[tuple, list[dict]] = {}
    for c in chunks:
        if c["state"] in ("near", "far"):
            runs.setdefault((c["run"], c["key"], c["state"]), []).append(c)
    table: dict[tuple[str, str], tuple[list[float], list[float], list[float]]] = {}
    for (_run, key, state), members in runs.items():
        base = float(np.median([c["ms"] for c in members]))
        quiet, busy, ms = table.setdefault((names.get(key, key[:12]), state), ([], [], []))
        for c in members:
            noisy = any(v > CONTENTION_FACTOR * u
                        for v, u in zip(c["before"], usual[c["run"]], strict=True))
            (busy if noisy else quiet).append(c["ms"] / base)
            ms.append(c["ms"])
    print(f"  per variant: chunks with every CPU's reading <= {CONTENTION_FACTOR:.1f} x its "
          "usual (quiet) against one above (busy); time over the run's median")
    print(f"    {'variant':<62} {'placement':<6} {'ms':>7} {'quiet':>5} {'busy':>5} "
          f"{'quiet':>6} {'busy':>6} {'busy/quiet':>10}")
    lines = []
    for (name, state), (quiet, busy, ms) in table.items():
        if len(quiet) < 2 or len(busy) < 2:
            continue
        q, b = float(np.median(quiet)), float(np.median(busy))
        lines.append((b / q, f"    {name:<62} {state:<6} {np.median(ms):7.3f} {len(quiet):5d} "
                              f"{len(busy):5d} {q:6.3f} {b:6.3f} {b / q:9.2f}x"))
    for _, line in sorted(lines, reverse=True):
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--onnx", type=Path, default=None)
    parser.add_argument("--from-db", type=Path, default=None,
                        help="replay the rules on a workspace's stored timing runs")
    parser.add_argument("--source", default="%",
                        help="with --from-db: sweep, remeasure, or %% for both")
    args = parser.parse_args()
    if args.from_db:
        replay(args.from_db, args.source)
        return

    import onnxruntime as ort

    from dlas.measure.contention import CONTENTION_FACTOR
    from dlas.measure.placement import cache_stream_ns, round_trip_ns

    path = args.onnx
    if path is None:
        path = Path(tempfile.mkdtemp()) / "small.onnx"
        small_model(path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(
        [d if isinstance(d, int) else 1 for d in inp.shape]).astype(np.float32)
    cpus = sorted(os.sched_getaffinity(0))[:2]
    cache: dict[int, list[float]] = {c: [] for c in cpus}
    infer: dict[int, list[float]] = {c: [] for c in cpus}
    trips: list[float] = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            reading = cache_stream_ns(cpu)
            session.run(None, {inp.name: x})
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                session.run(None, {inp.name: x})
                times.append(time.perf_counter() - t0)
            if reading is not None:
                cache[cpu].append(reading)
                infer[cpu].append(float(np.median(times)) * 1e3)
        os.sched_setaffinity(0, set(cpus))
        if len(cpus) > 1:
            rt = round_trip_ns(cpus[0], cpus[1])
            if rt is not None:
                trips.append(rt)
        time.sleep(0.2)
    print(f"{len(infer[cpus[0]])} readings per CPU over {args.seconds:.0f} s; round trip "
          f"median {np.median(trips) if trips else float('nan'):.0f} ns")
    for cpu in cpus:
        c, o = np.array(cache[cpu]), np.array(infer[cpu])
        if len(c) < 10:
            continue
        slow = o > 1.15 * np.percentile(o, 25)
        usual = np.percentile(c, 10)
        print(f"\nCPU {cpu}: inference lower quartile {np.percentile(o, 25):.3f} ms, "
              f"{slow.mean():.0%} of readings slow; cache usual {usual:.2f} ns/KiB; "
              f"correlation {np.corrcoef(o, c)[0, 1]:.2f}")
        for factor in sorted({1.1, 1.15, CONTENTION_FACTOR, 1.3}):
            flagged = c > factor * usual
            hit = flagged[slow].mean() if slow.any() else float("nan")
            print(f"  factor {factor:.2f}{' (dlas)' if factor == CONTENTION_FACTOR else '':7}"
                  f" flags {hit:.0%} of slow readings, {flagged[~slow].mean():.0%} of others")


if __name__ == "__main__":
    main()
