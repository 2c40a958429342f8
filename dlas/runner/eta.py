"""The run's estimate, corrected as its stages finish.

`dlas run` prints its estimate (`dlas plan --estimate`) first and then, on every point's
line, how far the run is against it. An estimate fitted on one machine is off on another
(the quickstart's 8m31s on a Zen 3 took 10 minutes), and a fixed figure then sits at "8m31s
of ~8m31s estimated" for the run's last minutes. This keeps the plan's cost of every stage
to compute (`dlas.estimate.Estimate.tasks`) and, as stages finish, projects the rest at the
pace the run has kept so far: the wall time spent over the planned seconds done, with the
plan counted as `PLAN_WEIGHT` of its own seconds kept at its own pace. So a run's first
stages, which carry its one-off costs (a process's first training step, a timing group
waiting for a placement), move the projection less than later ones. The weight trades two
errors. Replaying two calm 16x16 quickstarts on a Zen 4, whose first stages ran slow and
the rest fast, the early overshoot was 31-33% with the run's pace trusted from a fifth of
the plan on (before), 24% with a quarter of the plan as prior and 18-20% with half; but a
run uniformly 1.24x slower than its plan (the Zen 4 in a slow state; a Zen 3 against a
plan fitted elsewhere) is projected 7% short at a quarter of the way and 3% at half with a
quarter as prior, 10% and 5% with half, where trusting its pace early is exact. The issue
that asked for the projection was a slow machine's, so the prior is a quarter. The
projection reaches the time spent when the last planned stage finishes.

A timed stage (`measure`, `baseline`) is planned once per timing pass; the console counts
it when its point ends (a later pass times it in a group worker, not as a stage), each
pass's end accounting for that pass's share as the plan priced it: the built-in cost
gives a later pass `LATER_PASS_SHARE` of the first (it re-checks one input and times,
where the first verifies in full), a measured entry the same to every pass. Split evenly
instead, the first pass's timing was credited a third of its seconds where it took half,
and a quickstart's projection sat 10% high through its first pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: The plan's own pace weighs as this share of its seconds, at pace 1, beside the seconds
#: done at the run's pace (a prior: see the module doc).
PLAN_WEIGHT = 0.25
#: The stages timed in every pass (`dlas.stages.TIMED_STAGES`, kept here so the console
#: need not import the stages).
TIMED = frozenset({"measure", "baseline"})


@dataclass
class RunningEstimate:
    """The planned seconds of each report of each (stage, key), and those done so far."""

    total_s: float
    #: Per (stage, key), the seconds each of its reports accounts for: one report for a
    #: stage computed once, one per timing pass for a timed stage.
    planned: dict[tuple[str, str], tuple[float, ...]]
    done_s: float = 0.0
    _seen: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def of(cls, total_s: float, tasks: Iterable[tuple[str, str, float, float]],
           timed: set[str], pass_weights: Sequence[float] = (1.0,)) -> RunningEstimate:
        """From the estimate's (stage, key, measured seconds, built-in seconds) tasks;
        `timed` stages run once per timing pass, each pass's built-in seconds weighed as
        `pass_weights` says (the estimate's `dlas.estimate.costmodel.pass_weights`: see
        the module doc)."""
        passes = len(pass_weights)
        planned: dict[tuple[str, str], tuple[float, ...]] = {}
        for stage, key, measured_s, builtin_s in tasks:
            if stage not in timed or passes <= 1:
                planned[(stage, key)] = (measured_s + builtin_s,)
                continue
            planned[(stage, key)] = tuple(measured_s / passes
                                          + builtin_s * w / sum(pass_weights)
                                          for w in pass_weights)
        return cls(total_s, planned)

    def finished(self, stage: str, key: str) -> None:
        """A stage finished (computed here or on a helper), or a timed stage's pass: its
        planned share is done."""
        task = (stage, key)
        reports = self.planned.get(task)
        if reports is None:
            return
        seen = self._seen.get(task, 0)
        if seen >= len(reports):
            return
        self._seen[task] = seen + 1
        self.done_s += reports[seen]

    def projected_s(self, spent_s: float) -> float:
        """The run's whole duration as it looks now: the time spent plus the plan's
        remaining seconds at the blended pace (see the module doc)."""
        left = max(self.total_s - self.done_s, 0.0)
        if self.done_s <= 0 or self.total_s <= 0:
            return max(self.total_s, spent_s)
        prior = PLAN_WEIGHT * self.total_s
        pace = (spent_s + prior) / (self.done_s + prior)
        return spent_s + left * pace
