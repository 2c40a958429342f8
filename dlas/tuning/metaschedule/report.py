"""What a tuning run reports per task and per point, and the modes it runs in, as types.

Its own module so that the tuning session (`dlas.tuning.metaschedule.tune`), the
compile stage's facts and the tests read one definition of each outcome.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from dlas.tuning.metaschedule.database import TuningDatabase
from dlas.tuning.metaschedule.tasks import Task

#: What kind of search space a task has: "dense" (MetaSchedule's generic one), "vector"
#: (a dense conv in NHWC/NCHWc: the micro-kernel's space, `vector_space`) or "sparse"
#: (a CSR kernel, `sparse_space`).
TaskKind = Literal["dense", "vector", "sparse"]
#: What happened to a task at a point (`TaskReport.outcome`).
Outcome = Literal["tuned", "reused", "transferred", "untuned", "failed"]
#: Transfer-tuning: "on" (replay matching tasks' schedules, then search), "only" (no
#: search trials), "off".
TransferMode = Literal["on", "only", "off"]
#: How a point's trials are shared among its tasks: "time" (in proportion to each task's
#: share of the model's time, measured: `plan.allot_by_time`) or "flops" (the gradient
#: scheduler's first round over the tasks, largest MACs first).
Allocation = Literal["time", "flops"]


@dataclass
class TaskReport:
    task: str
    kind: TaskKind
    #: "tuned" (searched at this point), "reused" (tuned by an earlier point),
    #: "transferred" (no search trials for the workload, but schedules of other tuned
    #: workloads were replayed and measured on it: at this point, or by an earlier one
    #: whose records are reused; `source` says whether one of them or the minimal
    #: schedule applies), "untuned" (no search trials and nothing transferred: the
    #: minimal schedule applies), "failed" (no valid candidate).
    outcome: Outcome
    trials: int = 0
    best_us: float | None = None
    seconds: float = 0.0
    ended_by: str = ""
    note: str = ""
    #: The algorithm's minimal schedule, measured like any candidate.
    minimal_us: float | None = None
    #: Where the applied schedule came from: "searched", "minimal" (it was faster) or
    #: "transferred from <task>" (a schedule of that workload, replayed on this one).
    source: str = ""
    #: Transferred schedules measured for this task by this point (not search trials).
    transfer_candidates: int = 0


@dataclass
class TuningReport:
    database: str
    tasks: list[TaskReport] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(t.outcome == outcome for t in self.tasks)

    @property
    def trials(self) -> int:
        """Trials measured by this run (reused tasks cost none)."""
        return sum(t.trials for t in self.tasks if t.outcome != "reused")

    @property
    def transfer_candidates(self) -> int:
        """Transferred schedules measured by this run."""
        return sum(t.transfer_candidates for t in self.tasks)

    def summary(self) -> dict[str, Any]:
        return {"database": self.database, "seconds": self.seconds, "trials": self.trials,
                "tasks": len(self.tasks), "tuned": self.count("tuned"),
                "reused": self.count("reused"), "untuned": self.count("untuned"),
                "failed": self.count("failed"), "transferred": self.count("transferred"),
                "transfer_candidates": self.transfer_candidates,
                "per_task": [asdict(t) for t in self.tasks]}


def reused_report(db: TuningDatabase, task: Task, kind: TaskKind, note: str) -> TaskReport:
    """A task the ledger says needs nothing at this point. A workload never searched
    (an earlier point's scheduler gave it no trials) whose records include transferred
    schedules is labelled so, as that earlier point labelled it; else it is reused."""
    entry = db.entry(task.mod, task.name)
    searched = max(entry.trials, db.measured_trials(task.mod))
    outcome = "transferred" if entry.transferred and searched == 0 else "reused"
    return TaskReport(task.name, kind, outcome, trials=entry.trials,
                      best_us=db.best_us(task.mod), ended_by=entry.ended_by, note=note)


def with_source(report: TaskReport, minimal_us: float | None, db: TuningDatabase,
                 task: Task) -> TaskReport:
    """Say whether the schedule applied is the searched one or the minimal one. The
    database's best record is applied; it is the minimal schedule when it schedules the
    same module (the search can measure the minimal trace again, from the database's
    records it seeds its population with, and that reading may be the faster one)."""
    report.minimal_us = minimal_us
    if report.outcome not in ("tuned", "reused", "failed", "transferred"):
        return report
    if report.outcome == "failed":
        report.source = "minimal" if minimal_us is not None else ""
        return report
    entry = db.entry(task.mod, task.name)
    best = db.best_schedule_key(task.mod)
    # a transferred best is known by its key, measured minimal schedule or not (a point
    # that measures nothing new reads no minimal time for a task it does not change)
    if best is not None and best in entry.transferred:
        report.source = f"transferred from {entry.transferred[best]}"
        return report
    if minimal_us is None:
        return report
    if entry.minimal_key is not None:
        kept_minimal = best == entry.minimal_key
    else:  # a ledger from before schedules were identified: compare times
        kept_minimal = report.best_us is not None and report.best_us >= minimal_us
    report.source = "minimal" if kept_minimal else "searched"
    return report
