"""The persistent tuning database of one target, shared by every sweep in a workspace.

MetaSchedule's JSON database stores each measured candidate as it is measured, keyed by
the task's structure (shapes, dtypes, algorithm, fused epilogue). Beside it a small
ledger says which workloads were tuned to completion, with how many trials and whether
early stopping ended them, so that

* a workload tuned once for this target is never tuned again (any sweep, any model);
* a tuning run that was interrupted resumes: its measured trials are in the database
  (and seed the search), the ledger says how many remain;
* asking for more trials than a workload got tunes only the difference.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tvm
from tvm.s_tir import meta_schedule as ms
from tvm_ffi import structural_hash

from dlas.sweep.grid import digest
from dlas.targets.base import TargetSpec

LEDGER_FILE = "dlas_ledger.json"


def database_dir(root: Path, target: TargetSpec) -> Path:
    """One directory per target: what code is generated for (the TVM target) and where it
    is measured (the CPU model, or the RPC key of a board)."""
    where = {"target": target.tvm_target, "hardware": target.fingerprint,
             "rpc_key": target.rpc.key if target.rpc else None}
    return Path(root) / f"{target.name}-{digest(where)[:12]}"


def workload_key(mod: tvm.IRModule) -> str:
    """MetaSchedule's own workload identity: the structural hash of the task's module."""
    return f"{structural_hash(mod) & 0xFFFFFFFFFFFFFFFF:016x}"


@dataclass
class LedgerEntry:
    task: str
    #: Trials measured for this workload so far (all runs together).
    trials: int = 0
    #: Trials per task the last completed tuning allowed (`trials_per_task`).
    requested: int = 0
    #: The trial budget of the point whose session last tuned it (the gradient scheduler
    #: may have given this task few or none of them, and a point with the same budget
    #: reuses that decision rather than tuning the task again).
    point_budget: int = 0
    #: True once a run ended without being interrupted.
    complete: bool = False
    #: Why the last run ended: "budget" (its `requested` trials), "early_stop",
    #: "space_exhausted", or "scheduler" (the session's budget went to other tasks).
    ended_by: str = ""
    best_us: float | None = None
    tuning_s: float = 0.0
    #: The algorithm's minimal schedule, measured and stored as one more record (not a
    #: trial: `measured_trials` leaves it out), so the best record never loses to it.
    minimal_us: float | None = None
    #: The minimal schedule's identity (`workload_key` of the module it schedules), so the
    #: report can tell "the best record is the minimal schedule" by what it is, not by
    #: comparing times: the search may measure the same schedule again and draw a faster
    #: reading of it.
    minimal_key: str | None = None
    #: Schedules transferred from other workloads (`transfer`), stored as records of this
    #: one: the schedule's `workload_key` -> the source task's name.
    transferred: dict[str, str] = field(default_factory=dict)
    #: The transfer step ran for this workload (it is measured once).
    transfer_done: bool = False


class TuningDatabase:
    """The JSON database and ledger of one target."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.database = ms.database.JSONDatabase(work_dir=str(self.path),
                                                 module_equality="structural")
        self._ledger_path = self.path / LEDGER_FILE
        self.ledger: dict[str, LedgerEntry] = {}
        if self._ledger_path.exists():
            raw = json.loads(self._ledger_path.read_text())
            self.ledger = {k: LedgerEntry(**v) for k, v in raw.items()}

    def entry(self, mod: tvm.IRModule, task: str) -> LedgerEntry:
        return self.ledger.setdefault(workload_key(mod), LedgerEntry(task=task))

    def measured_trials(self, mod: tvm.IRModule) -> int:
        """Trials of this workload stored in the database (interrupted runs included):
        its records less the minimal schedule and transferred ones, which are not search trials."""
        if not self.database.has_workload(mod):
            return 0
        workload = self.database.commit_workload(mod)
        records = len(self.database.get_top_k(workload, 1 << 30))
        entry = self.ledger.get(workload_key(mod))
        if entry is None:
            return records
        extra = int(entry.minimal_us is not None) + len(entry.transferred)
        return max(records - extra, 0)

    def best_us(self, mod: tvm.IRModule) -> float | None:
        if not self.database.has_workload(mod):
            return None
        top = self.database.get_top_k(self.database.commit_workload(mod), 1)
        if not top or not top[0].run_secs:
            return None
        secs = [float(s) for s in top[0].run_secs]
        return sum(secs) / len(secs) * 1e6

    def best_schedule_key(self, mod: tvm.IRModule) -> str | None:
        """`workload_key` of the module the best record schedules (what is applied)."""
        from tvm import s_tir

        if not self.database.has_workload(mod):
            return None
        top = self.database.get_top_k(self.database.commit_workload(mod), 1)
        if not top:
            return None
        sch = s_tir.Schedule(mod)
        top[0].trace.apply_to_schedule(sch, remove_postproc=False)
        return workload_key(sch.mod)

    def needs(self, mod: tvm.IRModule, task: str, trials: int, point_budget: int = 0) -> int:
        """How many more trials this workload needs to have been tuned with `trials` (per
        task) in a point of `point_budget` trials."""
        entry = self.entry(mod, task)
        if entry.complete and entry.ended_by in ("early_stop", "space_exhausted"):
            return 0  # it converged before its budget
        if (entry.complete and entry.requested >= trials
                and (entry.ended_by == "budget" or entry.point_budget >= point_budget)):
            return 0  # tuned with at least this budget
        return max(trials - max(entry.trials, self.measured_trials(mod)), 0)

    def save(self) -> None:
        tmp = self._ledger_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in self.ledger.items()}, indent=1))
        os.replace(tmp, self._ledger_path)
