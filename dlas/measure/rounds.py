"""The sampler: the variants of one model timed round-robin, in rounds labelled with the
vCPUs' placement and the machine's load.

Why rounds, and why interleaved (`docs/timing.md`): on the VMs dlas runs on, what a
multi-threaded timing reads depends on where the hypervisor has placed the vCPUs at that
moment (`dlas.measure.placement`), and that flips every few seconds to minutes. Timing
variant A for a while and then variant B lets a flip land between them and decide the
comparison. So every variant of a model takes a short chunk of samples in every round,
in a random order per round (Abedi & Brecht's randomized multiple interleaved trials),
and each chunk is labelled with the placement read right before and right after it; a
chunk whose placement changed is "mixed" and not used. Why per chunk and not per round:
probed every 5 ms for a minute (docs/timing.md), the placement changed 28 times, with
far spells from 8 ms to 2.4 s; a round of a dozen variants lasts a second or two, and
probes at its ends missed spells that slowed the chunks between them 1.5-2x. Chunks are
kept short for the same reason (`CHUNK_MAX_S`). Rounds are the unit the confidence
interval resamples (`dlas.results.statistics`).

When to stop, and which placement a figure uses: `dlas.measure.stopping`, pure rules
the sampler asks after every kept round. A round taken while other processes used the
CPUs (the load probe, `dlas.measure.load`) is discarded and taken again after waiting for
a quiet machine, within the noise budget; what is still loaded when it is spent is kept,
marked, and flags the row noisy.

Before each chunk the sampler pauses briefly (`settle_s`): a runtime's pool threads spin
for a while after each call (TVM's, ONNX Runtime's, OpenMP's), and the next chunk,
possibly of another runtime, and the probe must not share the CPUs with them. Each chunk
starts with discarded warm-up calls: the variant before it has filled the caches with
its own weights. One call is not enough everywhere: on a 2-vCPU Zen 3 (2026-12-01) a
variant's first calls after the others' chunks read slow for milliseconds, not for one
call (ONNX Runtime's samples 1 to 6 after its one warm-up call at 1.43, 1.30, 1.27, 1.19,
1.13 and 1.10x the chunk's last ones, TVM's 1.10 to 1.01x; one-thread ONNX Runtime after
a 10 ms pause took 8 calls, 6 ms, to come back). So from its second chunk on, a variant
warms up for `RoundsPolicy.warmup_s` at the time per call its last chunk read.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from dlas.measure.contention import CONTENTION_FACTOR, ContentionJudge, Verdict
from dlas.measure.load import CpuLoadProbe, busiest_processes
from dlas.measure.placement import (
    CONTENDED,
    MIXED,
    NEAR,
    SINGLE,
    SLOW_ROUND_TRIP,
    UNKNOWN,
    UNUSABLE,
    PlacementProbe,
    PlacementReading,
)
from dlas.measure.record import TimingRound, TimingRun
from dlas.measure.round_trip import ROUND_TRIP_FACTOR, RoundTripJudge, RoundTripVerdict
from dlas.measure.stopping import (
    RoundCounts,
    RoundsPolicy,
    Waiting,
    choose_placement,
    next_step,
)

#: A chunk lasts at most about this long (fewer samples per chunk for slow variants):
#: the shorter a chunk, the less often a placement change falls inside it.
CHUNK_MAX_S = 0.25


class Subject(Protocol):
    """A variant the sampler times."""

    #: Identifies it in the rounds (unique within one run).
    label: str
    #: CPUs its threads run on (one: placement does not matter; empty: not on this host).
    cpus: Sequence[int]

    def time(self, n: int, warmup: int) -> Sequence[float]:
        """`n` samples in seconds per inference, after `warmup` discarded calls."""


@dataclass
class _Chunk:
    """One subject's samples in one round, and the placement around them."""

    placement: str
    round_trip_ns: list[float | None]
    samples_s: list[float]
    at_s: float = 0.0
    position: int = 0
    previous: str | None = None
    #: The placement read around the chunk (`placement` is CONTENDED when the cache
    #: readings said so), and those readings: per CPU, before and after.
    state: str = ""
    cache_ns: list[list[float | None]] = field(default_factory=list)


@dataclass
class _Round:
    index: int
    loaded: bool
    other_cores: float | None
    at_s: float
    chunks: dict[str, _Chunk]

    def summary(self) -> str:
        """'near', or 'near 12, far 2' when the chunks differ."""
        counts = Counter(c.placement for c in self.chunks.values())
        if len(counts) == 1:
            return next(iter(counts))
        return ", ".join(f"{state} {n}" for state, n in counts.most_common())


def round_placement(before: PlacementReading, after: PlacementReading) -> str:
    """One label for a chunk: the placement read before it when it held until after."""
    if before.state == after.state:
        return before.state
    return MIXED


@dataclass
class RoundsResult:
    """The runs of every subject, and what the console should say about them."""

    runs: dict[str, TimingRun]
    placement: str
    notes: list[str] = field(default_factory=list)


class RoundSampler:
    """Takes the rounds of one timing run (see the module doc). Clock, sleep, probes and
    the random order are injectable so tests can force any sequence of events."""

    def __init__(self, subjects: Sequence[Subject], policy: RoundsPolicy, *,
                 placement: PlacementProbe | None, load: CpuLoadProbe | None,
                 single: bool = False, source: str = "sweep", threads: int | None = None,
                 pinned: bool = False,
                 say: Callable[[str], None] | None = None,
                 on_round: Callable[[int, str, float | None], None] | None = None,
                 on_chunk: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep, seed: int = 0) -> None:
        if not subjects:
            raise ValueError("no subjects to time")
        labels = [s.label for s in subjects]
        if len(set(labels)) != len(labels):
            raise ValueError(f"subject labels must be unique: {labels}")
        self.subjects = list(subjects)
        self.policy = policy
        self.placement = placement
        self.load = load
        #: No variant's threads span CPUs (one thread, or a GPU): placement cannot matter.
        self.single = single
        self.source, self.threads, self.pinned = source, threads, pinned
        self.say = say or (lambda _text: None)
        self.on_round = on_round or (lambda _i, _state, _rt: None)
        #: Told which subject is about to run (what a crash is blamed on).
        self.on_chunk = on_chunk or (lambda _label: None)
        self.clock, self.sleep = clock, sleep
        self.rng = np.random.default_rng(seed)
        self.events: list[dict[str, object]] = []
        self._per_sample: dict[str, float] = {}
        self._extra_s = 0.0  # waiting and discarded rounds, against the noise budget
        self._retries = 0
        #: Every cache reading per CPU position (`dlas.measure.placement`), for the
        #: contention judgement.
        self.contention = ContentionJudge()
        #: The usual round trip per placement, for chunks read slower than it.
        self.round_trip = RoundTripJudge()

    # -- one round --------------------------------------------------------------------

    def _read_placement(self) -> PlacementReading:
        if self.single:
            return PlacementReading(SINGLE)
        if self.placement is None:
            return PlacementReading(UNKNOWN)
        return self.placement.read()

    def _relabel(self, kept: list[_Round]) -> tuple[Verdict, RoundTripVerdict]:
        """Every kept chunk judged again for contention (`ContentionJudge.relabel`), then
        for a round trip slower than its placement's usual (`RoundTripJudge`): early
        chunks were judged against few readings, and a verdict can change."""
        chunks = [(label, c) for r in kept for label, c in r.chunks.items()]
        verdict = self.contention.relabel(chunks)
        judged = [(label, c) for label, c in chunks if c.state and c.state not in UNUSABLE]
        flags, slow = self.round_trip.flags(judged)
        for (_, chunk), flag in zip(judged, flags, strict=True):
            if flag and chunk.placement != CONTENDED:
                chunk.placement = SLOW_ROUND_TRIP
        return verdict, slow

    def _chunk_size(self, subject: Subject) -> int:
        """Samples in the subject's next chunk: its share of the samples per round, fewer
        when that would last longer than `CHUNK_MAX_S` (from its last chunk)."""
        per = self._per_sample.get(subject.label)
        n = self.policy.per_round
        if per is not None and per > 0:
            n = min(n, max(1, int(CHUNK_MAX_S / per)))
        return n

    def _warm_calls(self, subject: Subject, first: bool) -> int:
        """Discarded calls before the subject's next chunk: the policy's count (at least
        one in the first round), and enough more to run `warmup_s` of them at the time
        per call its last chunk read (module doc: a variant's first calls after others
        ran read slow for milliseconds, not for one call)."""
        warm = max(self.policy.warmup, 1) if first else self.policy.warmup
        per = self._per_sample.get(subject.label)
        if self.policy.warmup_s > 0 and per is not None and per > 0:
            warm = max(warm, math.ceil(self.policy.warmup_s / per))
        return warm

    def _take_round(self, index: int, started: float, first: bool) -> _Round:
        mark = self.load.begin() if self.load is not None else None
        at = self.clock() - started
        chunks: dict[str, _Chunk] = {}
        previous: str | None = None
        for position, i in enumerate(self.rng.permutation(len(self.subjects))):
            subject = self.subjects[int(i)]
            self.sleep(self.policy.settle_s)
            warm = self._warm_calls(subject, first)
            chunk_at = self.clock() - started
            self.on_chunk(subject.label)
            before = self._read_placement()
            samples = [float(s) for s in subject.time(self._chunk_size(subject), warm)]
            after = self._read_placement()
            if samples:
                self._per_sample[subject.label] = float(np.median(samples))
            state = round_placement(before, after)
            cache = [list(before.cache_ns), list(after.cache_ns)]
            self.contention.note(cache[:1])
            # labelled contended or not by `_relabel` once the round is kept
            chunks[subject.label] = _Chunk(state,
                                           [before.round_trip_ns, after.round_trip_ns],
                                           samples, chunk_at, position, previous, state,
                                           cache)
            previous = subject.label
        reading = self.load.end(mark) if (self.load is not None and mark is not None) else None
        return _Round(index, bool(reading and reading.loaded),
                      None if reading is None else round(reading.other_cores, 3), at, chunks)

    @staticmethod
    def _tally(kept: list[_Round], labels: list[str]
               ) -> tuple[dict[str, Counter[str]], dict[str, Counter[str]],
                          dict[str, Counter[str]]]:
        """Per subject and placement: usable chunks (known placement, not contended,
        quiet machine), their samples, and chunks with a known placement quiet or not.
        Counted afresh after every round: a chunk's contention verdict can change."""
        counts = {label: Counter[str]() for label in labels}
        samples = {label: Counter[str]() for label in labels}
        placed = {label: Counter[str]() for label in labels}
        for rnd in kept:
            for label, chunk in rnd.chunks.items():
                if chunk.placement in UNUSABLE:
                    continue
                placed[label][chunk.placement] += 1
                if not rnd.loaded:
                    counts[label][chunk.placement] += 1
                    samples[label][chunk.placement] += len(chunk.samples_s)
        return counts, samples, placed

    def _budget_left(self) -> float:
        return self.policy.noise_budget_s - self._extra_s

    def _handle_load(self, rnd: _Round, took: float) -> bool:
        """After a loaded round: wait for quiet within the budget. True when the round
        is to be discarded and taken again."""
        if self.load is None or self._retries >= self.policy.noise_retries \
                or self._budget_left() <= 0:
            self.events.append({"event": "kept_loaded", "round": rnd.index,
                                "other_cores": rnd.other_cores})
            return False
        who = busiest_processes(0.1)  # what the user can stop, named
        self.say(f"machine busy (other processes used {rnd.other_cores:.2f} cores"
                 + (f"; busiest: {', '.join(who)}" if who else "") + "); "
                 f"waiting up to {self._budget_left():.0f} s for it to quiet down")
        quiet, waited = self.load.wait_until_quiet(self._budget_left())
        self._extra_s += waited + took
        event = {"round": rnd.index, "other_cores": rnd.other_cores,
                 "waited_s": round(waited, 3), "busiest": who}
        if quiet is not None and not quiet.loaded:
            self._retries += 1
            self.events.append({"event": "retaken", **event})
            return True
        self.events.append({"event": "kept_loaded", **event})
        return False

    # -- the run ----------------------------------------------------------------------

    def target_placement(self) -> str:
        """The placement worth waiting for: single when no subject spans CPUs, unknown
        when the placement cannot be probed, else near."""
        if self.single:
            return SINGLE
        return UNKNOWN if self.placement is None else NEAR

    def _noise_budget_spent(self) -> bool:
        return self._retries >= self.policy.noise_retries or self._budget_left() <= 0

    def _runs(self, kept: list[_Round], placement: str, run_id: str, started_at: float,
              seconds: float) -> dict[str, TimingRun]:
        """Each subject's timing run: its chunk of every kept round, as records."""
        runs = {}
        for subject in self.subjects:
            rounds = []
            for r in kept:
                chunk = r.chunks[subject.label]
                rounds.append(TimingRound(
                    index=r.index, placement=chunk.placement,
                    round_trip_ns=chunk.round_trip_ns, loaded=r.loaded,
                    other_cores=r.other_cores, at_s=round(chunk.at_s, 3),
                    position=chunk.position, previous=chunk.previous,
                    cache_ns=chunk.cache_ns,
                    samples_ms=[s * 1e3 for s in chunk.samples_s]))
            runs[subject.label] = TimingRun(
                run_id=run_id, started_at=started_at, source=self.source,
                threads=self.threads, cpus=list(subject.cpus) if self.pinned else [],
                placement=placement,
                interleaved_with=[s.label for s in self.subjects if s is not subject],
                rounds=rounds, policy=self.policy.as_dict(), events=list(self.events),
                seconds=round(seconds, 3))
        return runs

    def run(self) -> RoundsResult:
        policy = self.policy
        run_id = uuid.uuid4().hex
        started_at, started = time.time(), self.clock()
        target = self.target_placement()
        labels = [s.label for s in self.subjects]
        kept: list[_Round] = []
        counts, samples, placed = self._tally(kept, labels)
        waiting = Waiting()
        index = 0
        verdict, slow = Verdict(0), RoundTripVerdict(0)

        while len(kept) < policy.max_rounds:
            t0 = self.clock()
            rnd = self._take_round(index, started, first=index == 0)
            index += 1
            if rnd.loaded and self._handle_load(rnd, self.clock() - t0):
                continue
            kept.append(rnd)
            verdict, slow = self._relabel(kept)
            counts, samples, placed = self._tally(kept, labels)
            rt = next((v for c in rnd.chunks.values() for v in c.round_trip_ns
                       if v is not None), None)
            self.on_round(len(kept), rnd.summary(), rt)
            tally = RoundCounts(counts, samples, placed, len(kept),
                                any(r.loaded for r in kept))
            step = next_step(policy, target, tally, waiting, self.clock(),
                             self._noise_budget_spent())
            waiting = step.waiting
            if step.began_waiting_in is not None and policy.waits_for_target:
                self.say(f"enough rounds in {step.began_waiting_in} placement; taking more "
                         f"for up to {policy.placement_budget_s:.0f} s in case the vCPUs "
                         f"move to {target} placement")
            if step.stop:
                break
        total = Counter[str]()
        for label in labels:
            total.update(counts[label])
        placement = choose_placement(
            Counter({s: min(counts[label][s] for label in labels) for s in total}),
            policy.min_rounds)
        notes: list[str] = []
        if placement is None:  # every chunk mixed, erratic or loaded: use what there is
            any_placed = Counter[str]()
            for label in labels:
                any_placed.update(placed[label])
            placement = choose_placement(any_placed, policy.min_rounds) or MIXED
            notes.append(f"no round had a steady placement on a quiet machine; the figure "
                         f"uses the {placement} rounds")
        chunks = sum(len(r.chunks) for r in kept)
        contended = verdict.contended
        if verdict.ignored:
            self.events.append({"event": "contention_ignored", "reason": verdict.ignored,
                                "slowdown": verdict.slowdown})
        if contended:
            self.events.append({"event": "contended", "chunks": contended,
                                "slowdown": verdict.slowdown,
                                "of": chunks, "usual_cache_ns": {
                                    str(cpu): round(v, 3)
                                    for cpu, v in self.contention.usual().items()},
                                "limit_cache_ns": {
                                    str(cpu): round(v, 3)
                                    for cpu, v in self.contention.limits().items()}})
        if verdict.ignored and verdict.slowdown is not None:  # flags not confirmed
            # the rounds above were printed as they came, flags and all
            notes.append(f"the chunks the cache readings flagged as contended ran "
                         f"x{verdict.slowdown:.2f} of the others: none left out")
        if slow.ignored:
            self.events.append({"event": "round_trip_ignored", "reason": slow.ignored,
                                "slowdown": slow.slowdown})
        if slow.flagged:
            self.events.append({"event": "slow_round_trip", "chunks": slow.flagged,
                                "slowdown": slow.slowdown, "of": chunks,
                                "usual_ns": slow.usual_ns})
        if chunks and slow.flagged > chunks // 4:
            notes.append(f"{slow.flagged} of {chunks} chunks were taken while the round trip "
                         f"between the measurement's CPUs was above {ROUND_TRIP_FACTOR:.2f}x "
                         "its usual for the placement, and ran slower; they are left out")
        if chunks and contended > chunks // 4:
            notes.append(f"{contended} of {chunks} chunks were taken while something else "
                         "used a measurement CPU's core caches (cache reading above "
                         f"{CONTENTION_FACTOR:.1f}x its usual and beyond this run's own "
                         "spread); they are left out")
        if waiting.enough_since is not None and policy.waits_for_target:
            # what the run's wait for its target placement got: the sweep stops waiting
            # once one came to nothing (`dlas.runner.placement_waits`)
            self.events.append({"event": "placement_wait", "target": target,
                                "placement": placement, "reached": placement == target,
                                "seconds": round(self.clock() - min(
                                    t for t in (waiting.rounds_since, waiting.enough_since)
                                    if t is not None), 3)})
        runs = self._runs(kept, placement, run_id, started_at, self.clock() - started)
        return RoundsResult(runs, placement, notes)
