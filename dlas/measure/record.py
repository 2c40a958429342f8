"""What one timing run of one variant records: every round of samples, the vCPU placement
each round was taken in, and what the machine was doing.

This is the unit of the timing history (`dlas.results.store`, table `timing_runs`): a
sweep writes one run per measured point, `dlas run --remeasure` adds another, and the
row's figures (`dlas.results.latency`) are computed over them. Rounds are kept whole
because the confidence interval resamples them (`dlas.results.statistics`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dlas.measure.placement import UNUSABLE


class TimingRound(BaseModel):
    """One round of the interleaved sampler, for one variant."""

    model_config = ConfigDict(extra="ignore")

    index: int
    #: Placement of the measurement's CPUs over the round (`dlas.measure.placement`):
    #: near, far, single (one CPU), unknown (no probe), erratic (the probe was
    #: disturbed), mixed (it changed during the round), contended (something
    #: else used a measurement CPU's core caches: `cache_ns` rose; `dlas.measure.rounds`),
    #: or slow_round_trip (`round_trip_ns` above its placement's usual, where such chunks
    #: ran slower: `dlas.measure.round_trip`).
    placement: str
    #: Round trips read before and after the round, ns.
    round_trip_ns: list[float | None] = Field(default_factory=list)
    #: Other processes kept the CPUs busy during the round (the load probe said so).
    loaded: bool = False
    #: CPU other processes used during the round, in cores (None without a probe).
    other_cores: float | None = None
    #: Seconds since the run started, when this chunk began.
    at_s: float = 0.0
    #: Where the chunk fell in its round's random order, and the variant just before it
    #: (what may have left its threads spinning or its weights in the caches).
    position: int = 0
    previous: str | None = None
    #: Cache-contention readings (ns per KiB streamed, `dlas.measure.placement`), per
    #: CPU, before and after the chunk; empty when not read.
    cache_ns: list[list[float | None]] = Field(default_factory=list)
    samples_ms: list[float]


class TimingRun(BaseModel):
    """Every round one timing run took of one variant, and how it took them."""

    model_config = ConfigDict(extra="ignore")

    #: Unique per run; rounds of variants timed in the same run share it (and their
    #: round indices), which is how comparisons pair them.
    run_id: str
    #: Unix time the run started.
    started_at: float
    #: "sweep" (timed when first needed) or "remeasure" (`dlas run --remeasure`).
    source: str = "sweep"
    threads: int | None = None
    #: CPUs the measurement's threads were pinned to (empty: not pinned).
    cpus: list[int] = Field(default_factory=list)
    #: The CPUs each thread of the timing process was allowed on at the end of the run
    #: (what the pinning actually did, for the record).
    thread_cpus: list[list[int]] = Field(default_factory=list)
    #: The placement this run's own figure is taken from (the preferred one that has
    #: enough rounds; `dlas.measure.stopping.choose_placement`).
    placement: str
    #: Labels of the variants interleaved in the same rounds.
    interleaved_with: list[str] = Field(default_factory=list)
    rounds: list[TimingRound]
    #: How the rounds were taken: samples per round, rounds wanted, budget, probes.
    policy: dict[str, Any] = Field(default_factory=dict)
    #: Notable moments: rounds discarded or kept under load, waits for a placement.
    events: list[dict[str, Any]] = Field(default_factory=list)
    #: Seconds the run took, warm-up and probes included.
    seconds: float = 0.0

    def usable_rounds(self, placement: str | None = None) -> list[TimingRound]:
        """Rounds with a known placement (not mixed, erratic or loaded), optionally only
        those in `placement`."""
        return [r for r in self.rounds
                if r.placement not in UNUSABLE and not r.loaded
                and (placement is None or r.placement == placement)]

    def loaded_rounds(self) -> list[TimingRound]:
        return [r for r in self.rounds if r.loaded]
