"""Contention: whether something else used a measurement CPU's core caches while a chunk
was timed (most likely another guest on its SMT sibling).

Each chunk is preceded by a cache reading per CPU (ns per KiB streamed, as
`dlas.measure.placement.cache_stream_ns` reads it; taken inside the placement reading's one
native call, `probe_ns`). A CPU's usual reading is its 10th percentile over the run so far.
A chunk is labelled `CONTENDED`, and not used, when its reading before it exceeds the CPU's
limit: `CONTENTION_FACTOR` x the usual reading, or the run's median reading plus
`CONTENTION_SPREADS` robust standard deviations (1.4826 x the median absolute deviation)
when this host's readings vary more than that, whichever is higher. The reading after the
chunk is recorded but does not judge: it also reads the variant's own pool threads still
spinning (after PyTorch's chunks: 10.4 ns/KiB, against 8.6 before them).

Why the second term: the factor was fitted on a Zen 5, whose idle readings sit within a
few percent of their floor. Other hosts' idle readings spread wider: on a Zen 3, and on a
Xeon Cascade Lake in some hours (median reading 1.32x its 10th percentile, nothing else
running), 1.3x the floor dropped 73% of the chunks, which ran 1% slower than those kept.
The limit derived from the run's own spread dropped 8% there, chunks 15% slower than those
kept (68% of them slower by 10% or more); where readings are tight it is the factor's
limit, as before (`benchmarks/contention.py --from-db` replays both rules on stored runs).

Why the readings must be confirmed by the chunks they flag: on a Zen 4 (2026-11-29,
quickstart), one CPU's readings sat at 8.7 ns/KiB for part of a run and 12-13 for the
rest, with nothing else running; 12-13 is what every other run on that host read. Both
limits put the 8.7 mode as usual and flagged 41 of 135 chunks, which ran x1.007 (median)
of the same variants' kept chunks in the same placement: four rows were left with too
few rounds and called noisy, for nothing. In runs whose flags were real (session 18's
benchmark workspaces on the same host) the flagged chunks ran x1.06-1.58. So once enough
chunks are flagged, the judge compares each with its own variant's kept chunks in the
same placement; when the flagged ones ran no slower (median below `CONFIRM_SLOWDOWN`),
the readings are not telling disturbed chunks apart on this host in this run, and none
is left out. Each flagged chunk is compared only with its own variant's chunks, so the
rule tests the signal, not a chunk's luck: a whole run's flags stand or fall together.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dlas.measure.placement import CONTENDED, UNUSABLE

#: A cache reading this many times the CPU's usual one (its 10th percentile over the
#: run) means contention. Measured on Zen 5 (docs/timing.md): 1.3 flags 47-67% of the
#: spells that slowed one-thread ONNX Runtime by 15% or more and 2-4% of the other
#: readings; 1.2 flagged 45-65% of all chunks in real timing runs, doubling their length.
CONTENTION_FACTOR = 1.3
#: The host's own spread: a reading more than this many robust standard deviations above
#: the run's median reading is contention, however wide the host's normal readings are.
CONTENTION_SPREADS = 4.0
#: A normal distribution's standard deviation per median absolute deviation.
MAD_TO_SIGMA = 1.4826
#: Readings of a CPU needed before its usual reading is trusted.
CONTENTION_MIN_READINGS = 6
#: Flagged chunks must run at least this much slower than their variants' kept chunks in
#: the same placement (median ratio) for the readings to be believed: innocent flags on
#: Zen 4 ran x0.99-1.02, real contention x1.06-1.58 (the module doc).
CONFIRM_SLOWDOWN = 1.03
#: Flagged chunks with kept peers (at least `CONFIRM_MIN_PEERS` of their variant's chunks
#: in their placement) needed before the flags can be lifted: fewer cost little to drop.
CONFIRM_MIN_CHUNKS = 6
CONFIRM_MIN_PEERS = 2
#: Where a signal's flags must be shown before they count (`confirm(until_shown=True)`):
#: the one-sided sign test's level for "more flagged chunks ran slower than their peers
#: than chance would make" (6 of 6 slower: p = 0.016; 23 of 27: p < 0.001; 5 of 8: 0.36).
CONFIRM_P = 0.05


def contention_limit(usual: float, readings: Sequence[float]) -> float:
    """The reading above which a CPU is contended (see the module doc): `usual` (its 10th
    percentile) x the factor, or the median of its `readings` (taken before chunks; the
    ones after read the variant's spinning threads too) plus the spreads in robust
    standard deviations, whichever is higher."""
    arr = np.asarray(readings, dtype=float)
    if arr.size == 0:
        return CONTENTION_FACTOR * usual
    median = float(np.median(arr))
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(arr - median)))
    return max(CONTENTION_FACTOR * usual, median + CONTENTION_SPREADS * sigma)


#: Per CPU, the readings before and after a chunk (ns per KiB; None where not read).
CacheReadings = list[list[float | None]]


class JudgedChunk(Protocol):
    """A chunk as contention sees it: the placement read around it (`state`), the label
    it is used by (`placement`: `state`, or CONTENDED), its cache readings and its
    samples (seconds)."""

    state: str
    placement: str
    cache_ns: CacheReadings
    samples_s: list[float]


class SampledChunk(Protocol):
    """What confirming a flag needs of a chunk: the placement read around it and its
    samples (seconds)."""

    state: str
    samples_s: list[float]


@dataclass(frozen=True)
class Verdict:
    """What `ContentionJudge.relabel` decided for a run's chunks."""

    #: Chunks left out as contended.
    contended: int
    #: Why the readings' flags were all lifted (None: they stand, or none was raised).
    ignored: str | None = None
    #: The flagged chunks' median time over their variants' kept chunks in the same
    #: placement, where enough could be compared.
    slowdown: float | None = None


def flagged_ratios(chunks: Sequence[tuple[str, SampledChunk]], flags: Sequence[bool],
                   min_peers: int = CONFIRM_MIN_PEERS) -> list[float]:
    """Each flagged chunk's median sample over the median of its variant's unflagged
    chunks in the same placement state; a flagged chunk with fewer than `min_peers` such
    peers is not compared."""
    kept: dict[tuple[str, str], list[float]] = {}
    for (subject, chunk), flag in zip(chunks, flags, strict=True):
        if not flag and chunk.samples_s:
            kept.setdefault((subject, chunk.state), []).append(
                float(np.median(chunk.samples_s)))
    ratios = []
    for (subject, chunk), flag in zip(chunks, flags, strict=True):
        peers = kept.get((subject, chunk.state), [])
        if flag and chunk.samples_s and len(peers) >= min_peers:
            base = float(np.median(peers))
            if base > 0:
                ratios.append(float(np.median(chunk.samples_s)) / base)
    return ratios


def sign_test_p(ratios: Sequence[float]) -> float:
    """One-sided sign test: the chance of at least this many ratios above 1 among those
    not equal to 1, were each as likely below 1 as above (a flag that says nothing)."""
    above = sum(1 for r in ratios if r > 1.0)
    n = sum(1 for r in ratios if r != 1.0)
    if n == 0:
        return 1.0
    # integer division: 2.0 ** n overflows a float past n = 1023 (a long run's chunks)
    return sum(math.comb(n, k) for k in range(above, n + 1)) / (1 << n)


def confirm(chunks: Sequence[tuple[str, SampledChunk]], flags: Sequence[bool], *,
            flagged_by: str, every: str, why: str = "", until_shown: bool = False
            ) -> tuple[list[bool], str | None, float | None]:
    """A run's flags as they stand, why they were lifted (None: they stand) and the
    flagged chunks' slowdown (the median of `flagged_ratios`). Every flag is lifted when every chunk
    is flagged (`every`: the signal then says nothing useful), or when the flagged chunks
    ran less than `CONFIRM_SLOWDOWN` of their variants' others: a run's flags stand or
    fall together. The one confirmation of every chunk signal (cache readings here, round
    trips in `dlas.measure.round_trip`).

    `until_shown`: the flags count only once the chunks they flag show them: at least
    `CONFIRM_MIN_CHUNKS` compared (each with one unflagged chunk of its variant or more:
    where a slow state holds most chunks, two are rare), their median at least
    `CONFIRM_SLOWDOWN`, and more of them slower than their peers than chance would make
    (`sign_test_p` below `CONFIRM_P`). Without it a flag stands until shown wrong, which
    costs a round for every flagged chunk meanwhile: on a Zen 3 whose near round trips
    spread 65-125 ns for nothing, one timing run's flags (70-124 chunks, none with two
    unflagged chunks of its own variant to be compared with) stood through five extra
    rounds before they fell."""
    ratios = flagged_ratios(chunks, flags, 1 if until_shown else CONFIRM_MIN_PEERS)
    slowdown = float(np.median(ratios)) if ratios else None
    compared = len(ratios)
    ignored: str | None = None
    if flags and all(flags):
        ignored = every
    elif (slowdown is not None and compared >= CONFIRM_MIN_CHUNKS
          and slowdown < CONFIRM_SLOWDOWN):
        ignored = (f"the {sum(flags)} chunks {flagged_by} ran x{slowdown:.3f} of their "
                   f"variants' others in the same placement (median of {compared}): not "
                   f"slowed{why}")
    elif until_shown and any(flags):
        if compared < CONFIRM_MIN_CHUNKS:
            ignored = (f"the {sum(flags)} chunks {flagged_by} could not yet be shown "
                       f"slower ({compared} compared with their variants' others, "
                       f"{CONFIRM_MIN_CHUNKS} needed){why}")
        elif (p := sign_test_p(ratios)) >= CONFIRM_P:
            above = sum(1 for r in ratios if r > 1.0)
            ignored = (f"the {sum(flags)} chunks {flagged_by} ran x{slowdown:.3f} of their "
                       f"variants' others, {above} of {compared} slower: chance would do "
                       f"as much (p={p:.2f}){why}")
    return ([False] * len(flags) if ignored else list(flags)), ignored, slowdown


class ContentionJudge:
    """The usual cache reading of each CPU, learned over a run, and the verdict on each
    chunk against it."""

    def __init__(self) -> None:
        self._seen: dict[int, list[float]] = {}

    def note(self, cache: CacheReadings) -> None:
        """Learn from a chunk's readings (the sampler gives the ones before it only)."""
        for reading in cache:
            for cpu, value in enumerate(reading):
                if value is not None:
                    self._seen.setdefault(cpu, []).append(value)

    def usual(self) -> dict[int, float]:
        """Each CPU's usual cache reading (10th percentile), once there are enough."""
        return {cpu: float(np.percentile(values, 10))
                for cpu, values in self._seen.items()
                if len(values) >= CONTENTION_MIN_READINGS}

    def limits(self) -> dict[int, float]:
        """Each CPU's contention limit (`contention_limit`), once there are enough."""
        return {cpu: contention_limit(usual, self._seen[cpu])
                for cpu, usual in self.usual().items()}

    @staticmethod
    def contended(cache: CacheReadings, limits: dict[int, float]) -> bool:
        """Whether the reading before a chunk (`cache[0]`, per CPU) is above its CPU's
        limit (`limits`)."""
        return any(value is not None and cpu in limits and value > limits[cpu]
                   for cpu, value in enumerate(cache[0] if cache else []))

    def relabel(self, chunks: Sequence[tuple[str, JudgedChunk]]) -> Verdict:
        """Judge every chunk (with its subject's label) for contention again against the
        limits of the readings seen so far (early chunks were judged against few; a run
        that began inside a spell learns what usual is later). No chunk is left out
        when every chunk would be (the readings then say nothing useful), or when the
        flagged chunks ran no slower than their variants' others (`CONFIRM_SLOWDOWN`)."""
        limits = self.limits()
        judged = [(s, c) for s, c in chunks if c.state and c.state not in UNUSABLE]
        flags, ignored, slowdown = confirm(
            judged, [self.contended(c.cache_ns, limits) for _, c in judged],
            flagged_by="the cache readings flagged", every="every chunk read as contended",
            why=", so the readings are not telling disturbed chunks apart here")
        for (_, chunk), contended in zip(judged, flags, strict=True):
            chunk.placement = CONTENDED if contended else chunk.state
        return Verdict(sum(flags), ignored, slowdown)
