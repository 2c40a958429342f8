"""The run's estimate, corrected as its stages finish.

`dlas run` prints its estimate (`dlas plan --estimate`) first and then, on every point's
line, how far the run is against it. An estimate fitted on one machine is off on another
(the quickstart's 8m31s on a Zen 3 took 10 minutes), and a fixed figure then sits at "8m31s
of ~8m31s estimated" for the run's last minutes. This keeps the plan's cost of every stage
to compute (`dlas.estimate.Estimate.tasks`) and, as stages finish, projects the rest at the
pace the run has kept so far: the wall time spent over the planned seconds done, blended in
from the plan's own pace while less than `TRUST_SHARE` of the plan is done (a first stage
that loads a dataset says little). The projection reaches the time spent when the last
planned stage finishes.

A timed stage (`measure`, `baseline`) is planned once per timing pass; the console counts
it when its point ends (a later pass times it in a group worker, not as a stage), each
pass's end accounting for one pass's share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Share of the planned seconds done before the run's own pace replaces the plan's.
TRUST_SHARE = 0.2
#: The stages timed in every pass (`dlas.stages.TIMED_STAGES`, kept here so the console
#: need not import the stages).
TIMED = frozenset({"measure", "baseline"})


@dataclass
class RunningEstimate:
    """The planned seconds per (stage, key), and those done so far."""

    total_s: float
    planned: dict[tuple[str, str], float]
    #: Planned reports of each timed (stage, key): its timing passes.
    reports: dict[tuple[str, str], int] = field(default_factory=dict)
    done_s: float = 0.0
    _seen: dict[tuple[str, str], int] = field(default_factory=dict)

    @classmethod
    def of(cls, total_s: float, tasks: list[tuple[str, str, float]], timed: set[str],
           passes: int) -> RunningEstimate:
        """From the estimate's (stage, key, seconds) tasks; `timed` stages run `passes`
        times."""
        planned = {(stage, key): seconds for stage, key, seconds in tasks}
        reports = {(stage, key): max(passes, 1) for stage, key, _ in tasks if stage in timed}
        return cls(total_s, planned, reports)

    def finished(self, stage: str, key: str) -> None:
        """A stage finished (computed here or on a helper): its planned share is done."""
        task = (stage, key)
        if task not in self.planned:
            return
        seen = self._seen.get(task, 0)
        allowed = self.reports.get(task, 1)
        if seen >= allowed:
            return
        self._seen[task] = seen + 1
        self.done_s += self.planned[task] / allowed

    def projected_s(self, spent_s: float) -> float:
        """The run's whole duration as it looks now: the time spent plus the plan's
        remaining seconds at the blended pace (see the module doc)."""
        left = max(self.total_s - self.done_s, 0.0)
        if self.done_s <= 0 or self.total_s <= 0:
            return max(self.total_s, spent_s)
        trust = min(1.0, self.done_s / (TRUST_SHARE * self.total_s))
        pace = (1.0 - trust) + trust * (spent_s / self.done_s)
        return spent_s + left * pace
