"""How a point's tuning is planned: which tasks need trials (`TuningJob`), how many each gets
(`allot_by_time`), and how they group into sessions (`sessions`). Pure where it can be, so
each rule is tested by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlas.tuning.metaschedule.database import TuningDatabase
from dlas.tuning.metaschedule.measure import task_signature
from dlas.tuning.metaschedule.report import TaskKind
from dlas.tuning.metaschedule.tasks import Task

#: Fewer trials than this on a task are not worth its search's start (the first batch of
#: an evolutionary search is mostly random samples).
MIN_TASK_TRIALS = 8


def allot_by_time(times: list[float], needs: list[int], budget: int,
                  minimum: int) -> list[int]:
    """Trials per task in proportion to its time, each at most its need, summing to at most
    `budget`: water-filling. A task whose proportional share reaches its need gets its need
    and leaves the rest to the others; while the smallest task's share is under `minimum`,
    it gets none and the others share again; what rounding leaves goes to the largest
    tasks. Pure, so the rule is tested by hand."""
    allot = [0] * len(times)
    active = [i for i, (t, n) in enumerate(zip(times, needs, strict=True)) if t > 0 and n > 0]
    left = budget
    while active and left > 0:
        total = sum(times[i] for i in active)
        raw = {i: left * times[i] / total for i in active}
        capped = [i for i in active if raw[i] >= needs[i]]
        if capped:
            for i in capped:
                allot[i] = needs[i]
                left -= needs[i]
            active = [i for i in active if i not in capped]
            continue
        smallest = min(active, key=lambda i: times[i])
        if raw[smallest] < minimum and len(active) > 1:
            active.remove(smallest)
            continue
        for i in active:
            allot[i] = int(raw[i])
        left -= sum(allot[i] for i in active)
        for i in sorted(active, key=lambda i: -times[i]):
            extra = min(left, needs[i] - allot[i])
            allot[i] += extra
            left -= extra
        break
    # a task lacking fewer than `minimum` trials (a resumed one) still gets what it lacks
    return [a if a >= min(minimum, budget) or a == need else 0
            for a, need in zip(allot, needs, strict=True)]


def task_time(db: TuningDatabase, job: TuningJob) -> float | None:
    """The task's time in one inference, us: its calls x its best schedule so far."""
    measured = [t for t in (job.minimal_us, db.best_us(job.task.mod)) if t]
    return job.task.weight * min(measured) if measured else None


@dataclass
class TuningJob:
    """A task of the point that needs trials."""

    index: int  # its rank among the point's tasks (largest first), for progress lines
    task: Task
    kind: TaskKind
    need: int
    minimal_us: float | None = None
    why: str = ""


@dataclass
class SessionPlan:
    """One tuning session: its budget and batch size, the jobs its scheduler's first round
    reaches (tuned) and those it cannot (no trials at this budget)."""

    budget: int
    per_iter: int
    reached: list[TuningJob]
    unreached: list[TuningJob]


def group_sessions(jobs: list[TuningJob]) -> list[list[TuningJob]]:
    """Jobs grouped into as few tuning sessions as their runner arguments allow: one,
    unless two CSR tasks have equal argument signatures but different arrays (the
    runner's allocator tells tasks apart by signature only)."""
    sessions: list[tuple[dict[str, Task], list[TuningJob]]] = []
    for job in jobs:
        values = job.task.index_constants()
        signature = task_signature(job.task.mod) if values else ""
        for seen, session in sessions:
            other = seen.get(signature)
            if not values or other is None or _same_values(other.index_constants(), values):
                session.append(job)
                if values:
                    seen[signature] = job.task
                break
        else:
            sessions.append(({signature: job.task} if values else {}, [job]))
    return [session for _, session in sessions]


def _same_values(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
