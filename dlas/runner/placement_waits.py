"""A run stops waiting for near placement once one wait came to nothing.

A timing group that has its rounds in far placement keeps taking rounds for up to its
pass's share of `budgets.placement_wait_s` (10 s of the default 30 over 3 passes) in case
the vCPUs move to near placement (`dlas.measure.stopping`, rule 4). On the hosts this
project's sessions get, the vCPUs stay where they are for minutes more often than not:
of 20 such waits in 14 quickstart-sized runs on a 2-vCPU Zen 3 (2026-12-01), 5 reached
near; of the waits that came after one had ended in far in the same run, 1 in 6 reached
near, and the run's other groups were mostly near from their start without any wait.
A Zen 4 whose vCPUs stayed far took every pass of 3 of 5 invocations far, waiting 10 s
per group each time (docs/timing.md). So a wait that ran its whole budget in far is this host's own
evidence, taken minutes ago, that another will not pay: the run's later groups (every
pass of it) do not wait for near, and the console says so once. A group that reaches near
without waiting is timed exactly as before; one that does not is timed in the placement
it has, as it would be after its wait, and its timing record shows the wait it skipped
(`policy.target_wait` false). Only that wait goes: a group whose rounds are split
between placements still takes rounds until one placement has enough of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from dlas.measure.record import TimingRun
from dlas.measure.stopping import RoundsPolicy


@dataclass
class PlacementWaits:
    """What this series of runs (a sweep's timing passes) learnt of waiting for near
    placement: None until a wait ran its budget without reaching its placement, then
    what to tell the user."""

    in_vain: str | None = None

    def policy(self, planned: RoundsPolicy) -> RoundsPolicy:
        """The group's rounds policy: `planned`, without its wait for the target
        placement once a wait of this run has come to nothing. Its bound on rounds that
        have no placement with enough of them yet stays (rule 3 of
        `dlas.measure.stopping`): a group whose rounds are split between placements goes
        on until one has enough, as before."""
        if self.in_vain is None or not planned.target_wait:
            return planned
        return replace(planned, target_wait=False)

    def observe(self, group: str, runs: Iterable[TimingRun | None]) -> str | None:
        """Take note of a timed group's runs; the console line to print when this group's
        wait is the first of the run to end without reaching its placement."""
        if self.in_vain is not None:
            return None
        for run in runs:
            waits = [e for e in run.events if e.get("event") == "placement_wait"] if run else []
            if waits and not waits[-1].get("reached", True):
                wait = waits[-1]
                self.in_vain = group
                return (f"the vCPUs stayed out of {wait.get('target')} placement through a "
                        f"{float(wait.get('seconds', 0.0)):.0f} s wait ({group}): this "
                        f"run's later timing groups do not wait for it (each is timed in "
                        f"the placement it has enough rounds in; docs/timing.md)")
        return None
