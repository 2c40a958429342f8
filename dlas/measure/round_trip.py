"""Sub-states of one placement: a chunk whose round trip between the measurement's CPUs
was slower than usual for its placement.

The placement probe (`dlas.measure.placement`) tells "near" (50-110 ns) from "far"
(300-400 ns). Inside "near" there are finer states. On an AMD EPYC Zen 4 (2026-11-29, four
independent timing invocations of the quickstart, nothing else running) the near round
trips fell in three tight groups, 50-55, 56-60 and 62 ns, each lasting seconds; chunks
taken at 62 ns ran 1.24-1.29x the variant's fastest chunks for every TVM variant and for
PyTorch, ONNX Runtime's ResNet18 1.9x, against 1.05-1.18x at 50-60 ns. The core clock did
not move with it (a dependent multiply-add chain read the same in every group), and the
cache readings (`dlas.measure.contention`) did not see it. One invocation timed all of
MobileNetV2's variants mostly at 62 ns and read them 1.3x slower than the next: so its
rows and the next's disagreed by up to 38%, with every row "near".

So each chunk's round trip, read before and after it, is compared with its placement's
usual round trip in this run (the 10th percentile of its readings so far): a chunk whose
slower reading exceeds `ROUND_TRIP_FACTOR` x that is flagged. As with the cache readings,
the flags must be confirmed by the chunks they flag (`dlas.measure.contention.
confirm`): where the flagged chunks ran no slower than their variants' others in
the same placement, this host's round trips are not telling states apart in this run and
every flag is lifted. Where they stand, the chunks are labelled `SLOW_ROUND_TRIP`: kept
with their readings, not used, and the run takes more rounds (within its placement
budget), as for contended chunks.

Unlike the cache readings' flags, these count only once the chunks show them
(`confirm(until_shown=True)`: at least 6 compared with their variants' others, x1.03 or
more, and more of them slower than chance would make). Presumed until shown wrong, they
cost rounds while the evidence was still missing: on an AMD EPYC Zen 3 (2026-11-30, two
quickstarts, 12 timing runs) the near round trips spread 65-125 ns, the flags of 11 runs
were lifted in the end (their chunks ran x0.87-1.02 of the others), and before that they
had stood for up to nine rounds, in one run over 70-124 chunks of which none could be
compared (no variant had two unflagged chunks left). Replayed round by round on those
runs (`python benchmarks/round_trip.py WORKSPACE/results.db`, its last table), the shown-first
rule lifts the flags of 9 of those 11 runs from their first round, and lets the other
two's stand for one and three rounds (against two and five); the one run whose flagged
chunks ran x1.04-1.05 of the others (23-40 of 27-53 slower) keeps its flags as before.

The factor: the runs' usual near round trips (10th percentiles) were 51-55 ns, and 1.12
flags 62 ns against any of them while leaving most of the 56-60 ns group, which ran as fast
as 50-55, unflagged. Hosts whose near readings spread wider for nothing (a Zen 3 read
60-110 ns) are what the confirmation is for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dlas.measure.contention import CONTENTION_MIN_READINGS, confirm
from dlas.measure.placement import FAR, NEAR

#: A chunk whose slower round trip (before or after it) exceeds this many times its
#: placement's usual round trip in the run is flagged (module doc: Zen 4's 62 ns state
#: against usual readings of 51-55 ns).
ROUND_TRIP_FACTOR = 1.12
#: The placements whose round trips are judged: those that synchronise across CPUs.
JUDGED_STATES = (NEAR, FAR)


class TimedChunk(Protocol):
    """A chunk as this judge sees it: the placement read around it (`state`), the round
    trips read before and after it, and its samples (seconds)."""

    state: str
    round_trip_ns: list[float | None]
    samples_s: list[float]


@dataclass(frozen=True)
class RoundTripVerdict:
    """What `RoundTripJudge.flags` decided for a run's chunks."""

    #: Chunks flagged (and not lifted).
    flagged: int
    #: Why the flags were all lifted (None: they stand, or none was raised).
    ignored: str | None = None
    #: The flagged chunks' median time over their variants' unflagged chunks in the same
    #: placement, where enough could be compared.
    slowdown: float | None = None
    #: Per judged placement, the usual round trip (ns) the flags were raised against.
    usual_ns: dict[str, float] | None = None


def _slower(chunk: TimedChunk) -> float | None:
    values = [v for v in chunk.round_trip_ns if v is not None]
    return max(values) if values else None


class RoundTripJudge:
    """Per placement, the usual round trip over a run, and which chunks exceed it."""

    def usual(self, chunks: Sequence[TimedChunk]) -> dict[str, float]:
        """Each judged placement's usual round trip: the 10th percentile of every reading
        (before and after) of the chunks read in it, once there are enough."""
        seen: dict[str, list[float]] = {}
        for chunk in chunks:
            if chunk.state in JUDGED_STATES:
                seen.setdefault(chunk.state, []).extend(
                    v for v in chunk.round_trip_ns if v is not None)
        return {state: float(np.percentile(values, 10)) for state, values in seen.items()
                if len(values) >= CONTENTION_MIN_READINGS}

    def flags(self, chunks: Sequence[tuple[str, TimedChunk]]
              ) -> tuple[list[bool], RoundTripVerdict]:
        """One flag per chunk (with its subject's label), and the verdict. Nothing is
        flagged when every judged chunk would be, or when the flagged chunks ran no
        slower than their variants' others (`CONFIRM_SLOWDOWN`): the run's flags stand or
        fall together."""
        usual = self.usual([c for _, c in chunks])
        judged = [i for i, (_, c) in enumerate(chunks) if c.state in usual]
        slow = []
        for i in judged:
            slower = _slower(chunks[i][1])
            slow.append(slower is not None
                        and slower > ROUND_TRIP_FACTOR * usual[chunks[i][1].state])
        kept, ignored, slowdown = confirm(
            [chunks[i] for i in judged], slow, flagged_by="with slow round trips",
            every="every chunk's round trip read as slow", until_shown=True)
        flags = [False] * len(chunks)
        for i, flag in zip(judged, kept, strict=True):
            flags[i] = flag
        return flags, RoundTripVerdict(sum(flags), ignored, slowdown,
                                       {s: round(v, 1) for s, v in usual.items()})
