"""Do finer states inside one placement slow the chunks, on this host? And what does dlas's
round-trip rule (`dlas.measure.round_trip`) leave out of the stored runs?

Every chunk a timing run stores carries the placement probe's round trip before and after
it. Per runtime and model, this prints how much slower the chunks ran (median of each
chunk's median over its variant's 10th-percentile chunk in the run's placement) in bands
of round trip relative to the placement's usual one in the run (its 10th percentile):
on an AMD EPYC Zen 4 the near chunks above 1.12x ran 1.2-1.9x, those below 1.05-1.18x.
Then the rule replayed run by run as the sampler judges it (flags confirmed by the
chunks they flag): how many chunks it leaves out and how much slower they ran than the
ones it keeps. A host where the rule lifts its flags, or leaves out chunks that ran as
fast, is one whose round trips say nothing beyond near and far.

    python benchmarks/round_trip.py WORKSPACE/results.db [...]

Last, the rule judged again after every round, as a live run meets it: a round after
which flags stand is one the run may repeat for them (on an AMD EPYC Zen 3, 2026-11-30,
flags presumed until shown wrong stood after up to nine rounds of runs whose flags all
fell in the end: `dlas.measure.round_trip`).

Replayed on stored runs, the rule cannot take the rounds a live run would take instead
of the chunks it leaves out; `benchmarks/independent.py` measures that.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Bands of a chunk's slower round trip over its placement's usual one in the run.
BANDS = ((0.0, 1.06), (1.06, 1.12), (1.12, 1.3), (1.3, float("inf")))


@dataclass
class StoredChunk:
    """A chunk as `dlas.measure.round_trip.RoundTripJudge` reads it, and where it came from."""

    state: str
    round_trip_ns: list[float | None]
    samples_s: list[float]
    point: str = ""
    runtime: str = ""
    model: str = ""
    #: The round of its run the chunk was taken in.
    round: int = 0


def stored_runs(db: Path) -> dict[str, list[StoredChunk]]:
    """Every timing run's chunks with a steady placement and both round trips, by run id
    (one run id covers every variant timed together)."""
    from dlas.measure.placement import classify

    runs: dict[str, list[StoredChunk]] = defaultdict(list)
    with sqlite3.connect(db) as con:
        query = ("select t.run_id, t.point_key, p.algorithm, p.model, t.record "
                 "from timing_runs t join points p on p.point_key = t.point_key")
        for run_id, key, algorithm, model, record in con.execute(query):
            runtime = algorithm if algorithm in ("onnxruntime", "pytorch") else "tvm"
            for rd in json.loads(record)["rounds"]:
                trips = rd.get("round_trip_ns") or []
                if not rd["samples_ms"] or len(trips) < 2 or None in trips:
                    continue
                state = classify(max(trips))
                if state != classify(min(trips)):
                    continue  # mixed
                runs[run_id].append(StoredChunk(
                    state, trips, [s / 1e3 for s in rd["samples_ms"]], key, runtime,
                    model.split("(")[0], int(rd.get("index", 0))))
    return runs


def bands(runs: dict[str, list[StoredChunk]]) -> None:
    from dlas.measure.round_trip import RoundTripJudge

    ratios: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for chunks in runs.values():
        usual = RoundTripJudge().usual(chunks)
        floor: dict[tuple[str, str], float] = {}
        by_variant: dict[tuple[str, str], list[float]] = defaultdict(list)
        for c in chunks:
            by_variant[(c.point, c.state)].append(float(np.median(c.samples_s)))
        for key, values in by_variant.items():
            floor[key] = float(np.percentile(values, 10))
        for c in chunks:
            if c.state not in usual:
                continue
            over = max(v for v in c.round_trip_ns if v is not None) / usual[c.state]
            band = next(i for i, (lo, hi) in enumerate(BANDS) if lo <= over < hi)
            ratios[(c.state, c.model, c.runtime)][band].append(
                float(np.median(c.samples_s)) / floor[(c.point, c.state)])
    head = "  ".join(f"x{lo:.2f}-{hi:.2f}" if hi < 9 else f">x{lo:.2f}" for lo, hi in BANDS)
    print(f"chunk time over its variant's 10th percentile, by round trip over the "
          f"placement's usual in the run (median, n):\n  {'':28}{head}")
    for (state, model, runtime), per in sorted(ratios.items()):
        cells = [f"{np.median(per[i]):.3f} ({len(per[i])})" if per.get(i) else "-"
                 for i in range(len(BANDS))]
        print(f"  {state:5} {model:12} {runtime:10} " + "  ".join(f"{c:>13}" for c in cells))


def replay(runs: dict[str, list[StoredChunk]]) -> None:
    from dlas.measure.round_trip import RoundTripJudge

    left, kept, lifted, stood = [], [], 0, 0
    for chunks in runs.values():
        pairs = [(c.point, c) for c in chunks]
        flags, verdict = RoundTripJudge().flags(pairs)
        if verdict.ignored:
            lifted += 1
        elif verdict.flagged:
            stood += 1
        by_variant: dict[tuple[str, str], list[float]] = defaultdict(list)
        for c, flag in zip(chunks, flags, strict=True):
            if not flag:
                by_variant[(c.point, c.state)].append(float(np.median(c.samples_s)))
        for c, flag in zip(chunks, flags, strict=True):
            peers = by_variant.get((c.point, c.state))
            if peers:
                (left if flag else kept).append(float(np.median(c.samples_s))
                                                / float(np.median(peers)))
    n = len(left) + len(kept)
    print(f"dlas's rule on {len(runs)} runs: flags stand in {stood}, lifted in {lifted}; "
          f"leaves out {len(left)}/{n} chunks ({len(left) / max(n, 1):.0%}), which ran "
          f"x{np.median(left) if left else float('nan'):.3f} of their variants' kept "
          f"chunks (kept: x{np.median(kept) if kept else float('nan'):.3f})")


def by_round(runs: dict[str, list[StoredChunk]]) -> None:
    """The rule as a live run meets it: judged again after every round on the rounds so
    far. A round after which flags stand is one the run may have to repeat for them."""
    from dlas.measure.round_trip import RoundTripJudge

    standing_rounds, lines = 0, []
    for run_id, chunks in runs.items():
        last = max((c.round for c in chunks), default=-1)
        cells = []
        for k in range(1, last + 2):
            pairs = [(c.point, c) for c in chunks if c.round < k]
            _, verdict = RoundTripJudge().flags(pairs)
            standing_rounds += verdict.flagged > 0
            cells.append(f"{verdict.flagged}" if verdict.flagged else ".")
        lines.append(f"  {run_id[:8]} {' '.join(cells)}")
    print(f"flagged chunks standing after each round (.: none), per run: {standing_rounds} "
          "round(s) with flags standing")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("databases", nargs="+", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[StoredChunk]] = {}
    for db in args.databases:
        runs.update(stored_runs(db))
    print(f"{sum(len(c) for c in runs.values())} chunks in {len(runs)} timing runs of "
          f"{len(args.databases)} workspace(s)")
    bands(runs)
    replay(runs)
    by_round(runs)


if __name__ == "__main__":
    main()
