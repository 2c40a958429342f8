"""When a timing run stops, and which placement its figure comes from: pure rules.

The sampler (`dlas.measure.rounds`) takes rounds; after each kept round it hands what it
has counted to `next_step`, which says whether to stop. Nothing here reads a clock, a
probe or the machine: the counts and the time are arguments, so every path of the rule
can be tested by value (`tests/test_stopping.py`) and read in one place.

The rule, in order:
1. Every variant has `min_rounds` usable chunks and `samples` samples in the target
   placement ("near": the state a multi-threaded timing is fastest and most repeatable
   in): stop.
2. Enough chunks in the target but too few samples: go on for the samples.
3. Once `min_rounds` rounds are kept: a busy machine whose noise budget is spent stops
   (what it gives is kept and flagged); and `placement_budget_s` after that point the
   run stops whatever the placement (chunks that never settle: mixed, erratic).
4. Enough usable chunks in a less preferred placement (or, with the noise budget spent,
   enough placed chunks, quiet or not): wait up to `placement_budget_s` for the target
   placement, then stop; without `target_wait` (a sweep whose earlier wait came to
   nothing: `dlas.runner.placement_waits`), stop at once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from dlas.measure.placement import PREFERENCE

#: Per variant label, per placement: a count (chunks or samples).
Tally = Mapping[str, Counter[str]]


#: Seconds of discarded calls before every chunk of a sweep's or a profile's timing
#: (`RoundsPolicy.warmup_s`): on a 2-vCPU Zen 3 a variant's calls after the other
#: variants' chunks (and the placement probe's cache reading) ran slow for 5-6 ms, ONNX
#: Runtime's first samples up to 1.4x (`dlas.measure.rounds`, module doc); 10 ms covers
#: that with room. It costs 10 ms a chunk: about 5 s of a quickstart's three passes.
WARMUP_S = 0.01


@dataclass(frozen=True)
class RoundsPolicy:
    """How many rounds to take and how long to try (from the sweep's budgets)."""

    #: Samples each variant needs in its headline placement (the paper's 150).
    samples: int = 150
    #: Usable rounds each variant needs in that placement: the CI resamples rounds, so
    #: fewer than about ten make it unreliable.
    min_rounds: int = 10
    #: Rounds never exceed this many (a machine that never settles).
    max_rounds: int = 60
    #: Seconds a run may keep taking rounds to reach the preferred placement.
    placement_budget_s: float = 30.0
    #: Whether rule 4 waits (that budget) for the target placement once another placement
    #: has enough rounds; rule 3's bound applies either way.
    target_wait: bool = True
    #: Re-takes of rounds taken under load, and seconds for waiting and re-taking.
    noise_retries: int = 5
    noise_budget_s: float = 20.0
    #: Pause before each chunk, for the previous runtime's spinning threads to sleep.
    settle_s: float = 0.005
    #: Discarded calls at the start of each chunk (the first chunk: at least the sweep's).
    warmup: int = 1
    #: And at least this many seconds of them, once a chunk of the variant has told its
    #: time per call (`WARMUP_S` for sweeps and profiles; 0: the count alone).
    warmup_s: float = 0.0

    @property
    def waits_for_target(self) -> bool:
        """Whether rule 4 can wait at all: a budget, and `target_wait`."""
        return self.placement_budget_s > 0 and self.target_wait

    @property
    def per_round(self) -> int:
        return max(1, math.ceil(self.samples / self.min_rounds))

    def as_dict(self) -> dict[str, float | int]:
        return {"samples": self.samples, "min_rounds": self.min_rounds,
                "max_rounds": self.max_rounds, "per_round": self.per_round,
                "placement_budget_s": self.placement_budget_s,
                "target_wait": self.target_wait,
                "noise_retries": self.noise_retries, "noise_budget_s": self.noise_budget_s,
                "settle_s": self.settle_s, "warmup": self.warmup,
                "warmup_s": self.warmup_s}


@dataclass(frozen=True)
class RoundCounts:
    """What the sampler has after a kept round, per variant and placement."""

    #: Usable chunks: a known placement, not contended, taken on a quiet machine.
    usable: Tally
    #: Their samples.
    samples: Tally
    #: Chunks with a known placement, quiet machine or not.
    placed: Tally
    #: Rounds kept so far.
    rounds: int
    #: Whether any kept round was taken while other processes used the CPUs.
    any_loaded: bool


@dataclass(frozen=True)
class Waiting:
    """The rule's memory between rounds: when each wait began (sampler clock, s)."""

    #: When `min_rounds` rounds had been kept (rule 3's bound starts there).
    rounds_since: float | None = None
    #: When some placement first had enough chunks (rule 4's wait starts there).
    enough_since: float | None = None


@dataclass(frozen=True)
class Step:
    """`next_step`'s answer: stop or not, the memory for the next round, and the
    placement that just became enough (the sampler says it is waiting for a better one)."""

    stop: bool
    waiting: Waiting
    began_waiting_in: str | None = None


def _everyone(tally: Tally, state: str, min_rounds: int) -> bool:
    return all(counter[state] >= min_rounds for counter in tally.values())


def next_step(policy: RoundsPolicy, target: str, counts: RoundCounts, waiting: Waiting,
              now: float, noise_budget_spent: bool) -> Step:
    """Whether the run stops after this round (the module's rule), from values alone."""
    n = policy.min_rounds
    if _everyone(counts.usable, target, n):
        enough_samples = all(counter[target] >= policy.samples
                             for counter in counts.samples.values())
        return Step(enough_samples, waiting)  # rules 1 and 2
    rounds_since, enough_since = waiting.rounds_since, waiting.enough_since
    if counts.rounds >= n:  # rule 3
        if noise_budget_spent and counts.any_loaded:
            return Step(True, waiting)
        if rounds_since is None:
            rounds_since = now
        elif now - rounds_since >= policy.placement_budget_s:
            return Step(True, waiting)
    enough = next((s for s in PREFERENCE if _everyone(counts.usable, s, n)), None)
    if enough is None and noise_budget_spent:
        enough = next((s for s in PREFERENCE if _everyone(counts.placed, s, n)), None)
    if enough is None:
        return Step(False, Waiting(rounds_since, enough_since))
    began = None
    if enough_since is None:  # rule 4's wait starts now
        enough_since = now
        began = enough
    return Step(not policy.target_wait or now - enough_since >= policy.placement_budget_s,
                Waiting(rounds_since, enough_since), began)


def choose_placement(counts: Counter[str], min_rounds: int) -> str | None:
    """The placement a figure is taken from: the first of `PREFERENCE` with at least
    `min_rounds` usable rounds; failing that, the one with most rounds (ties go to the
    preferred); None without any."""
    usable = {state: n for state, n in counts.items() if n > 0 and state in PREFERENCE}
    if not usable:
        return None
    enough = next((s for s in PREFERENCE if usable.get(s, 0) >= min_rounds), None)
    if enough is not None:
        return enough
    best = max(usable.values())
    return next(state for state in PREFERENCE if usable.get(state) == best)
