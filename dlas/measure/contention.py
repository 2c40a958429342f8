"""Contention: whether something else used a measurement CPU's core caches while a chunk
was timed (most likely another guest on its SMT sibling).

Each chunk is preceded by a cache reading per CPU (`dlas.measure.placement.cache_stream_ns`,
ns per KiB streamed). A CPU's usual reading is its 10th percentile over the run so far;
a chunk whose reading before it exceeds `CONTENTION_FACTOR` x that is labelled
`CONTENDED` and not used. The reading after the chunk is recorded but does not judge: it
also reads the variant's own pool threads still spinning (after PyTorch's chunks: 10.4
ns/KiB, against 8.6 before them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from dlas.measure.placement import CONTENDED, UNUSABLE

#: A cache reading this many times the CPU's usual one (its 10th percentile over the
#: run) means contention. Measured on Zen 5 (docs/timing.md): 1.3 flags 47-67% of the
#: spells that slowed one-thread ONNX Runtime by 15% or more and 2-4% of the other
#: readings; 1.2 flagged 45-65% of all chunks in real timing runs, doubling their length.
CONTENTION_FACTOR = 1.3
#: Readings of a CPU needed before its usual reading is trusted.
CONTENTION_MIN_READINGS = 6

#: Per CPU, the readings before and after a chunk (ns per KiB; None where not read).
CacheReadings = list[list[float | None]]


class JudgedChunk(Protocol):
    """A chunk as contention sees it: the placement read around it (`state`), the label
    it is used by (`placement`: `state`, or CONTENDED) and its cache readings."""

    state: str
    placement: str
    cache_ns: CacheReadings


class ContentionJudge:
    """The usual cache reading of each CPU, learned over a run, and the verdict on each
    chunk against it."""

    def __init__(self) -> None:
        self._seen: dict[int, list[float]] = {}

    def note(self, cache: CacheReadings) -> None:
        """Learn from a chunk's readings."""
        for reading in cache:
            for cpu, value in enumerate(reading):
                if value is not None:
                    self._seen.setdefault(cpu, []).append(value)

    def usual(self) -> dict[int, float]:
        """Each CPU's usual cache reading (10th percentile), once there are enough."""
        return {cpu: float(np.percentile(values, 10))
                for cpu, values in self._seen.items()
                if len(values) >= CONTENTION_MIN_READINGS}

    @staticmethod
    def contended(cache: CacheReadings, usual: dict[int, float]) -> bool:
        """Whether the reading before a chunk (`cache[0]`, per CPU) shows contention."""
        return any(value is not None and cpu in usual
                   and value > CONTENTION_FACTOR * usual[cpu]
                   for cpu, value in enumerate(cache[0] if cache else []))

    def relabel(self, chunks: Sequence[JudgedChunk]) -> tuple[int, bool]:
        """Judge every chunk's contention again against the usual readings seen so far
        (early chunks were judged against few; a run that began inside a spell learns
        what usual is later). Returns (how many are contended, whether contention was
        ignored): when every chunk would be contended, none is (the readings then say
        nothing useful)."""
        usual = self.usual()
        judged = [c for c in chunks if c.state and c.state not in UNUSABLE]
        verdicts = [self.contended(c.cache_ns, usual) for c in judged]
        ignored = bool(verdicts) and all(verdicts)
        if ignored:
            verdicts = [False] * len(verdicts)
        for chunk, contended in zip(judged, verdicts, strict=True):
            chunk.placement = CONTENDED if contended else chunk.state
        return sum(verdicts), ignored
