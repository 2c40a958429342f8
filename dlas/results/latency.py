"""A point's timing figures, from every timing run it has (its history).

The row's latency columns are computed here and nowhere else: the samples of the usable
chunks (known placement, quiet machine, not disturbed) of every run, per placement; the
figure is taken in the preferred placement that has enough of them
(`dlas.measure.placement.PREFERENCE`), with the median's confidence interval resampling
runs, rounds and samples (`dlas.results.statistics`). Runs with rounds kept on a busy
machine are left out when clean runs exist; if only such runs exist, their rounds are
used and the row says so.

Disturbed chunks: even with the placement steady at both ends of a chunk, some chunks run
1.2-2x slower than the variant's others, in every runtime alike (measured: a third of the
MobileNetV2 chunks in some runs, docs/timing.md): placement spells shorter than a chunk
(8 ms spells were seen) and interference no probe here sees. Such a disturbance only ever
adds time. A chunk whose median exceeds the lower quartile of the variant's chunk medians
in that placement by more than `DISTURBED` is left out of the figures and counted
(`disturbed_chunks`); on four timing runs of the quickstart, this took the worst run-to-
run difference of a variant's median from 16% to 9% and the median difference from 3.5%
to 1.7%. Every sample stays in the history.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlas.measure.placement import ERRATIC, PREFERENCE
from dlas.measure.record import TimingRound, TimingRun
from dlas.results.statistics import GroupKey, median_ci, pooled, summarize

#: Placement of a legacy entry (samples without rounds, before placements were probed).
LEGACY = "unknown"
#: A chunk slower than this times the lower quartile of its variant's chunk medians (in
#: one placement) is disturbed (see the module doc).
DISTURBED = 1.10
#: Fewer chunks than this in a placement: too few for a lower quartile; all are kept.
MIN_CHUNKS_FOR_FLOOR = 4


def legacy_run(samples_ms: Sequence[float], started_at: float = 0.0,
               noise: dict[str, Any] | None = None) -> TimingRun:
    """A timing entry written before rounds existed, as one run of one round."""
    loaded = bool((noise or {}).get("loaded_samples"))
    return TimingRun(run_id=f"legacy-{started_at:.0f}", started_at=started_at,
                     placement=LEGACY,
                     rounds=[TimingRound(index=0, placement=LEGACY, loaded=loaded,
                                         samples_ms=list(samples_ms))])


def _placed(runs: Sequence[TimingRun], placement: str, allow_loaded: bool
            ) -> list[tuple[TimingRun, TimingRound]]:
    return [(run, r) for run in runs for r in run.rounds
            if r.placement == placement and r.samples_ms and (allow_loaded or not r.loaded)]


def chunk_floor(chunks: Sequence[TimingRound]) -> float | None:
    """The lower quartile of the chunks' medians; None for too few chunks."""
    if len(chunks) < MIN_CHUNKS_FOR_FLOOR:
        return None
    return float(np.percentile([np.median(r.samples_ms) for r in chunks], 25))


def split_disturbed(runs: Sequence[TimingRun], placement: str, allow_loaded: bool
                    ) -> tuple[list[tuple[TimingRun, TimingRound]], int]:
    """(The undisturbed chunks of `placement`, how many were disturbed)."""
    placed = _placed(runs, placement, allow_loaded)
    floor = chunk_floor([r for _, r in placed])
    if floor is None:
        return placed, 0
    kept = [(run, r) for run, r in placed if np.median(r.samples_ms) <= DISTURBED * floor]
    return kept, len(placed) - len(kept)


def groups(runs: Sequence[TimingRun], placement: str, *, allow_loaded: bool = False
           ) -> dict[GroupKey, list[float]]:
    """Samples per (run, round) of the undisturbed chunks in `placement`: what the
    figures, the interval and comparisons use."""
    kept, _ = split_disturbed(runs, placement, allow_loaded)
    return {(run.run_id, r.index): list(r.samples_ms) for run, r in kept}


def chunk_spread(runs: Sequence[TimingRun], placement: str) -> float | None:
    """|log| of the interquartile ratio of the chunk medians in `placement` (usable runs,
    disturbed chunks included: they are the states the next run may fall in), the
    spread `dlas.results.drift.row_drift` widens a row's next-run range to; None with
    fewer than `MIN_CHUNKS_FOR_FLOOR` chunks."""
    used, loaded = usable_runs(runs)
    medians = [float(np.median(r.samples_ms)) for _, r in _placed(used, placement, loaded)]
    if len(medians) < MIN_CHUNKS_FOR_FLOOR:
        return None
    low, high = np.percentile(medians, [25, 75])
    return float(np.log(high / low)) if low > 0 else None


def usable_runs(runs: Sequence[TimingRun]) -> tuple[list[TimingRun], bool]:
    """(The runs figures come from, whether rounds taken on a busy machine are among
    them): clean runs when there are any, else all."""
    clean = [r for r in runs if not r.loaded_rounds()]
    return (clean, False) if clean else (list(runs), bool(runs))


def placement_counts(runs: Sequence[TimingRun], allow_loaded: bool) -> Counter[str]:
    counts: Counter[str] = Counter()
    for run in runs:
        for r in run.rounds:
            if r.placement in PREFERENCE and r.placement != ERRATIC \
                    and (allow_loaded or not r.loaded):
                counts[r.placement] += 1
    return counts


def headline_placement(counts: Counter[str], min_rounds: int) -> str | None:
    """The placement the row's figures are taken in: the preferred one with at least
    `min_rounds` rounds, else the one with most (`dlas.measure.stopping.choose_placement`,
    the rule each timing run chose by)."""
    from dlas.measure.stopping import choose_placement

    return choose_placement(counts, min_rounds)


@dataclass(frozen=True)
class PlacementFigures:
    median: float
    ci_low: float
    ci_high: float
    samples: int
    rounds: int
    runs: int

    def as_dict(self) -> dict[str, float | int]:
        return {"median_ms": self.median, "ci_low_ms": self.ci_low,
                "ci_high_ms": self.ci_high, "samples": self.samples,
                "rounds": self.rounds, "runs": self.runs}


def figures(runs: Sequence[TimingRun], placement: str, allow_loaded: bool
            ) -> PlacementFigures | None:
    grouped = groups(runs, placement, allow_loaded=allow_loaded)
    if not grouped:
        return None
    samples = pooled(grouped)
    ci = median_ci(grouped)
    return PlacementFigures(float(np.median(samples)), ci.low, ci.high, len(samples),
                            ci.rounds, ci.runs)


def invocation_figures(runs: Sequence[TimingRun], placement: str
                       ) -> PlacementFigures | None:
    """The figure of some of a point's runs (one invocation's passes) in `placement`, by
    the row's rule; None when none of their chunks is usable there."""
    used, loaded = usable_runs(runs)
    return figures(used, placement, allow_loaded=loaded)


def run_figures(run: TimingRun) -> PlacementFigures:
    """One run's figure in its own placement, by the row's rule (`figures`: usable,
    undisturbed chunks; loaded rounds only where no clean one exists), so that a
    profile's latency and a row's mean the same thing. A run with no usable chunk gives
    the figure of all its rounds."""
    fig = invocation_figures([run], run.placement)
    if fig is not None:
        return fig
    grouped = {(run.run_id, r.index): list(r.samples_ms) for r in run.rounds if r.samples_ms}
    samples = pooled(grouped)
    if not samples:
        raise ValueError(f"timing run {run.run_id} holds no samples")
    ci = median_ci(grouped)
    return PlacementFigures(float(np.median(samples)), ci.low, ci.high, len(samples),
                            ci.rounds, ci.runs)


def run_groups(run: TimingRun) -> dict[tuple[str, int], list[float]]:
    """The rounds `run_figures` takes its figure from: {(run id, round index): samples}."""
    used, loaded = usable_runs([run])
    return groups(used, run.placement, allow_loaded=loaded) or {
        (run.run_id, r.index): list(r.samples_ms) for r in run.rounds if r.samples_ms}


def latency_columns(runs: Sequence[TimingRun], ci_threshold: float) -> dict[str, Any]:
    """The row's timing columns (`dlas.results.row.ResultRow`) from a point's runs."""
    if not runs:
        raise ValueError("a timed row needs at least one timing run")
    used, loaded = usable_runs(runs)
    counts = placement_counts(used, allow_loaded=loaded)
    min_rounds = max((int(r.policy.get("min_rounds", 1)) for r in used), default=1)
    placement = headline_placement(counts, min_rounds)
    if placement is None:  # only mixed or erratic rounds: use them, flagged
        counts = Counter(r.placement for run in used for r in run.rounds)
        placement = counts.most_common(1)[0][0]
    by_placement = {}
    for state in [s for s in PREFERENCE if counts.get(s)] or [placement]:
        fig = figures(used, state, allow_loaded=loaded)
        if fig is not None:
            by_placement[state] = fig.as_dict()
    grouped = groups(used, placement, allow_loaded=loaded)
    samples = pooled(grouped) or [s for run in used for r in run.rounds
                                  for s in r.samples_ms]
    grouped = grouped or {(run.run_id, r.index): r.samples_ms for run in used
                          for r in run.rounds}
    summary = summarize(samples)
    ci = median_ci(grouped)
    kept, disturbed = split_disturbed(used, placement, loaded)
    by_run: dict[str, list[float]] = {}
    for run, r in kept:
        by_run.setdefault(run.run_id, []).extend(r.samples_ms)
    per_run = [float(np.median(v)) for v in by_run.values()]
    spread = float(max(per_run) / min(per_run) - 1.0) if len(per_run) > 1 else None
    rts = [v for _, r in kept for v in r.round_trip_ns if v is not None]
    loaded_rounds = sum(len(run.loaded_rounds()) for run in used)
    retries = sum(1 for run in used for e in run.events if e.get("event") == "retaken")
    others = [r.other_cores for run in used for r in run.rounds if r.other_cores is not None]
    reasons = []
    rel = (ci.high - ci.low) / summary.median if summary.median > 0 else float("inf")
    if loaded:
        reasons.append(f"{loaded_rounds} round(s) taken while other processes kept the CPUs "
                       f"busy (up to {max(others, default=0):.2f} cores); retry budget spent")
    if rel > ci_threshold:
        reasons.append(f"95% CI {rel:.0%} of the median > {ci_threshold:.0%}")
    if ci.rounds < min_rounds:  # e.g. a busy machine discarded the others
        reasons.append(f"{ci.rounds} usable round(s) in its placement, fewer than the "
                       f"{min_rounds} asked for (budgets.timing_rounds): the interval rests "
                       "on too few")
    if placement not in PREFERENCE or placement == ERRATIC:
        reasons.append(f"no round had a steady placement ({placement})")
    if kept and disturbed > 2 * len(kept):
        reasons.append(f"{disturbed} of {disturbed + len(kept)} chunks disturbed (slower "
                       f"than {DISTURBED:.2f}x the variant's lower quartile): fewer than a "
                       "third are left")
    return {
        "latency_median_ms": summary.median,
        "latency_ci_low_ms": ci.low,
        "latency_ci_high_ms": ci.high,
        "latency_mean_ms": summary.mean,
        "latency_std_ms": summary.std,
        "latency_min_ms": summary.min,
        "latency_max_ms": summary.max,
        "latency_cv": summary.cv,
        "latency_q1_ms": summary.q1,
        "latency_q3_ms": summary.q3,
        "latency_samples_ms": samples,
        "placement": placement,
        "placement_round_trip_ns": float(np.median(rts)) if rts else None,
        "latency_by_placement": by_placement,
        "timing_runs": len(runs),
        "timing_rounds": ci.rounds,
        "run_spread": spread,
        "disturbed_chunks": disturbed,
        "noisy": int(bool(reasons)),
        "noise_reason": "; ".join(reasons) or None,
        "load_retries": retries,
        "loaded_rounds": loaded_rounds,
        "load_other_cores": max(others) if others else None,
        "noise_log": {"runs": [{"run_id": run.run_id, "source": run.source,
                                "started_at": run.started_at, "placement": run.placement,
                                "policy": run.policy, "events": run.events,
                                "seconds": run.seconds} for run in runs]},
    }
