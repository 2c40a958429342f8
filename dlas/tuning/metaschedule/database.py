"""The persistent tuning database of one target, shared by every sweep in a workspace.

MetaSchedule's JSON database stores each measured candidate as it is measured, keyed by
the task's structure (shapes, dtypes, algorithm, fused epilogue). Beside it a small
ledger says which workloads were tuned to completion, with how many trials and whether
early stopping ended them, so that

* a workload tuned once for this target is never tuned again (any sweep, any model);
* a tuning run that was interrupted resumes: its measured trials are in the database
  (and seed the search), the ledger says how many remain;
* asking for more trials than a workload got tunes only the difference.

Several processes (a cluster's nodes over NFS, two sweeps on one workspace) may tune into
one database at once. The JSON tables are appended to under the directory's lock, each
record naming its workload's line in the shared file (`shared_database`). The ledger is
read once, when the database is opened, and `save` merges this process's changes into
what the file holds *now*, under the same lock (`merge_entry`), then replaces the file
whole (a temporary file and `os.replace`): no process's update is lost, and no reader
sees half a file.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import secrets
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import tvm
from tvm_ffi import structural_hash

from dlas.sweep.grid import digest
from dlas.targets.base import TargetSpec
from dlas.tuning.metaschedule.locks import exclusive
from dlas.tuning.metaschedule.shared_database import SharedJSONDatabase

log = logging.getLogger(__name__)

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


#: Counts of what was asked of and measured for a workload: both changed, the larger.
_LARGER = ("trials", "requested", "point_budget")
#: Fields with a rule of their own in `merge_entry` (not field by field).
_OWN_RULE = ("transferred", "transfer_done", "minimal_us", "minimal_key", "task")


def merge_entry(base: LedgerEntry | None, ours: LedgerEntry,
                theirs: LedgerEntry | None) -> LedgerEntry:
    """One workload's ledger entry after this process's save: `ours` (what this process
    holds) merged into `theirs` (what the file holds now, other processes' saves
    included), both derived from `base` (what this process last read or wrote).

    The rule is a three-way merge, field by field: a field this process did not change
    (ours == base) takes the file's value, one that only this process changed takes
    ours, and only a field both changed needs a rule:

    * `trials`, `requested`, `point_budget`: the larger. They count what was asked of and
      measured for the workload, and the larger covers the smaller; the sum would count
      the trials both processes read at the start twice, and an undercount is made good
      by the records themselves (`needs` and `measured_trials` take the database's count
      of them as a floor);
    * `tuning_s`: the file's value plus this process's increment (both added time);
    * `best_us`: the smaller (the records of both are in the database);
    * `minimal_us` with `minimal_key` (one pair): the file's, measured first;
    * `complete`, `ended_by`: ours, the account of the run that ended last (a bool that
      both changed from one value has one new value anyway);
    * `task`: the file's name (a workload shared by models has several names; the first
      one stays).

    Two fields only grow, whatever changed: `transferred` is the union of both mappings
    and `transfer_done` is true if either says so. A new entry (no base) is merged as if
    its base were a fresh `LedgerEntry`; an entry only the file has is kept as it is."""
    if theirs is None:
        return copy.deepcopy(ours)
    base = base if base is not None else LedgerEntry(task=ours.task)
    merged = copy.deepcopy(theirs)  # what nobody here changed stays the file's
    for f in fields(LedgerEntry):
        name = f.name
        b, o, t = getattr(base, name), getattr(ours, name), getattr(theirs, name)
        if name in _OWN_RULE or o == b:
            continue
        if t == b:  # only this process changed it
            value = o
        elif name in _LARGER:
            value = max(o, t)
        elif name == "tuning_s":
            value = t + (o - b)
        elif name == "best_us":
            value = min((v for v in (o, t) if v is not None), default=None)
        else:  # complete, ended_by: the run that ended last
            value = o
        setattr(merged, name, copy.deepcopy(value))
    merged.transferred = {**theirs.transferred, **ours.transferred}
    merged.transfer_done = theirs.transfer_done or ours.transfer_done
    pair = [(x.minimal_us, x.minimal_key) for x in (base, ours, theirs)]
    if pair[1] != pair[0] and pair[2] == pair[0]:  # only this process measured it
        merged.minimal_us, merged.minimal_key = pair[1]
    if ours.task != base.task and theirs.task == base.task:
        merged.task = ours.task
    return merged


def read_ledger(path: Path) -> dict[str, LedgerEntry]:
    """The ledger file's entries; an unreadable file (a torn write by an older dlas) is
    set aside beside it and counts as empty (the records stay in the JSON tables)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as err:
        aside = path.with_name(f"{path.name}.unreadable-{int(time.time())}")
        os.replace(path, aside)
        log.warning("tuning ledger %s unreadable (%s): moved to %s; starting afresh",
                    path, err, aside.name)
        return {}
    known = {f.name for f in fields(LedgerEntry)}
    return {k: LedgerEntry(**{n: v for n, v in e.items() if n in known})
            for k, e in raw.items()}


def write_ledger(path: Path, ledger: dict[str, LedgerEntry]) -> None:
    """Replace the ledger file whole: a temporary file of this process's own (two
    writers never share one), flushed to disk, then renamed over it (atomic: a reader
    sees the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open, not mkstemp: the file gets the umask's mode (mkstemp's is 0600), as the
    # ledger always had, for workspaces shared between users
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({k: asdict(v) for k, v in ledger.items()}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class TuningDatabase:
    """The JSON database and ledger of one target."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.database = SharedJSONDatabase(self.path)
        self._ledger_path = self.path / LEDGER_FILE
        with exclusive(self.path):
            self.ledger: dict[str, LedgerEntry] = read_ledger(self._ledger_path)
        #: The ledger as this process last read or wrote it: what `save` merges against.
        self._base: dict[str, LedgerEntry] = copy.deepcopy(self.ledger)

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
        """Write this process's ledger changes, merged (`merge_entry`) with what other
        processes saved since it read the file: under the directory's lock, the file is
        read again, merged, and replaced whole. This process's own entries stay as it
        holds them (it reads the database once per point), so the next save merges
        only what it changes from now on."""
        with exclusive(self.path):
            merged = read_ledger(self._ledger_path)
            for key, ours in self.ledger.items():
                merged[key] = merge_entry(self._base.get(key), ours, merged.get(key))
            write_ledger(self._ledger_path, merged)
        self._base = copy.deepcopy(self.ledger)
