"""Two processes tuning into one database directory (two nodes on a shared workspace)
lose no ledger update and leave MetaSchedule's JSON tables readable, each record filed
under its own workload; a partial last line a dead writer left is cut off, not fatal.

The processes are real (spawned), and start committing together (a barrier, after
both have read the database, as two points starting at once do). Without the
directory's lock and the merge each of these fails every time, not by chance: each
process's ledger holds only its own entries and its last save drops the other's, and
each process numbers the workloads it adds from the same table size, so both number
their first new workload n and one of them files its records under the other's.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm import s_tir, te
from tvm.s_tir import meta_schedule as ms

from dlas.tuning.metaschedule.database import (
    LEDGER_FILE,
    LedgerEntry,
    TuningDatabase,
    merge_entry,
    read_ledger,
)
from dlas.tuning.metaschedule.shared_database import RECORD_FILE, WORKLOAD_FILE

ROUNDS = 40
#: Workloads both processes add (rows of the elementwise kernel), and each one's own.
SHARED_ROWS = (1, 2, 3)
OWN_ROWS = {"a": (10, 11, 12, 13), "b": (20, 21, 22, 23)}
RECORDS_PER_WORKLOAD = 3


def _worker(tag: str, barrier: Any, ledger_dir: str, records_dir: str) -> None:
    """One of the two processes: ledger saves, then record commits, each into a
    directory the other process writes too."""
    ledger_db = TuningDatabase(Path(ledger_dir))  # read once, as a point does
    records_db = TuningDatabase(Path(records_dir))
    barrier.wait()
    for i in range(ROUNDS):
        ledger_db.ledger[f"{tag}-{i}"] = LedgerEntry(task=f"{tag}-{i}", trials=i + 1,
                                                     complete=True)
        shared = ledger_db.ledger.setdefault("shared", LedgerEntry(task="shared"))
        shared.trials = max(shared.trials, i + 1)
        shared.transferred[f"{tag}-{i}"] = tag
        shared.tuning_s += 1.0
        ledger_db.save()
    for n in range(RECORDS_PER_WORKLOAD):
        for rows in (*SHARED_ROWS, *OWN_ROWS[tag]):
            _commit(records_db, _module(rows), _record_id(tag, rows, n))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The ledger and the records directories, after two spawned processes wrote both at
    once (spawned once for the module's tests: a start costs seconds of imports)."""
    root = tmp_path_factory.mktemp("pair")
    ledger_dir, records_dir = root / "ledger", root / "records"
    TuningDatabase(ledger_dir)
    _commit(TuningDatabase(records_dir), _module(1), 1)  # a table to start from
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_worker, args=(tag, barrier, str(ledger_dir),
                                               str(records_dir))) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    return ledger_dir, records_dir


# --- the ledger ----------------------------------------------------------------------------

def test_two_processes_saving_one_ledger_lose_no_update(pair: tuple[Path, Path]) -> None:
    db_dir, _ = pair
    ledger = read_ledger(db_dir / LEDGER_FILE)
    own = {f"{tag}-{i}" for tag in "ab" for i in range(ROUNDS)}
    assert own <= ledger.keys(), sorted(own - ledger.keys())[:5]
    assert all(ledger[k].trials == int(k.split("-")[1]) + 1 and ledger[k].complete
               for k in own)
    shared = ledger["shared"]
    assert set(shared.transferred) == own  # both processes' additions, every one
    assert shared.trials == ROUNDS  # the larger count
    assert shared.tuning_s == pytest.approx(2 * ROUNDS)  # every increment of both
    # no temporary file left behind
    assert sorted(p.name for p in db_dir.iterdir() if "ledger" in p.name) == [LEDGER_FILE]


def test_merge_takes_what_this_process_changed_and_keeps_the_rest() -> None:
    base = LedgerEntry(task="t", trials=4, requested=4, complete=True, ended_by="budget",
                       best_us=10.0, tuning_s=1.0)
    # this process searched more and found better; another one transferred meanwhile
    ours = LedgerEntry(task="t", trials=8, requested=8, complete=True, ended_by="early_stop",
                       best_us=8.0, tuning_s=3.0)
    theirs = LedgerEntry(task="t", trials=6, requested=4, complete=True, ended_by="budget",
                         best_us=7.0, tuning_s=2.0, transferred={"k": "src"},
                         transfer_done=True, minimal_us=9.0, minimal_key="m")
    merged = merge_entry(base, ours, theirs)
    assert (merged.trials, merged.requested, merged.ended_by) == (8, 8, "early_stop")
    assert merged.best_us == 7.0 and merged.tuning_s == pytest.approx(4.0)
    assert merged.transferred == {"k": "src"} and merged.transfer_done
    assert (merged.minimal_us, merged.minimal_key) == (9.0, "m")
    # a task this process marks incomplete again (its search failed) is saved so, even
    # though the file still says complete (this process's own earlier save)
    failed = LedgerEntry(task="t", trials=4, requested=4, complete=False, ended_by="budget",
                         best_us=10.0, tuning_s=1.0)
    assert not merge_entry(base, failed, base).complete
    # an entry this process made, which another process made too
    fresh = merge_entry(None, LedgerEntry(task="t", trials=2), LedgerEntry(task="u", trials=5))
    assert fresh.trials == 5 and fresh.task == "u"


def test_two_databases_of_one_process_share_the_lock_and_merge(tmp_path: Path) -> None:
    """A second `TuningDatabase` of the same directory in one process (a test's beside
    a hook's) neither deadlocks on the lock nor drops the first one's entries."""
    first, second = TuningDatabase(tmp_path), TuningDatabase(tmp_path)
    first.ledger["x"] = LedgerEntry(task="x", trials=1)
    first.save()
    second.ledger["y"] = LedgerEntry(task="y", trials=2)
    second.save()
    assert set(read_ledger(tmp_path / LEDGER_FILE)) == {"x", "y"}


# --- the JSON tables -----------------------------------------------------------------------

def _module(rows: int) -> tvm.IRModule:
    a = te.placeholder((rows, 4), "float32", name="a")
    b = te.compute((rows, 4), lambda i, j: a[i, j] + 1.0, name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def _record_id(tag: str, rows: int, n: int) -> int:
    return {"a": 1, "b": 2}[tag] * 100_000 + rows * 100 + n


def _commit(db: TuningDatabase, mod: tvm.IRModule, record_id: int) -> None:
    sch = s_tir.Schedule(mod)
    sch.parallel(sch.get_loops(sch.get_sblock("b"))[0])
    workload = db.database.commit_workload(mod)
    db.database.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, run_secs=[record_id * 1e-9],
        target=tvm.target.Target({"kind": "llvm"}),
        args_info=ms.arg_info.ArgInfo.from_prim_func(mod["main"])))


def _rows_of(mod: tvm.IRModule) -> int:
    return int(mod["main"].params[0].ty.shape[0])  # a buffer is a typed Var in TVM 0.27


def test_two_processes_appending_records_keep_every_record_with_its_workload(
        pair: tuple[Path, Path]) -> None:
    _, db_dir = pair

    for name in (WORKLOAD_FILE, RECORD_FILE):  # every line whole and parseable
        data = (db_dir / name).read_bytes()
        assert data.endswith(b"\n")
        for line in data.splitlines():
            json.loads(line)
    # TVM's own reader loads the tables, and every record is there, under its workload
    plain = ms.database.JSONDatabase(work_dir=str(db_dir))
    got = {}
    for record in plain.get_all_tuning_records():
        record_id = round(float(record.run_secs[0]) * 1e9)
        got[record_id] = _rows_of(record.workload.mod)
    want = {_record_id(tag, rows, n): rows for tag in "ab"
            for rows in (*SHARED_ROWS, *OWN_ROWS[tag]) for n in range(RECORDS_PER_WORKLOAD)}
    want[1] = 1
    assert got == want
    # a workload both processes added is in the table once
    lines = (db_dir / WORKLOAD_FILE).read_bytes().splitlines()
    assert len(lines) == len(set(lines)) == len(SHARED_ROWS) + sum(map(len, OWN_ROWS.values()))


def test_a_partial_last_line_is_cut_off_and_appends_go_on(tmp_path: Path) -> None:
    """A writer that died mid-line (or an older dlas without the lock) left half a
    line: the database opens without it and the next append starts a line of its own;
    a torn line inside the table (two old writers interleaved) is skipped."""
    db = TuningDatabase(tmp_path)
    _commit(db, _module(1), 1)
    _commit(db, _module(2), 2)
    records = tmp_path / RECORD_FILE
    whole = records.read_bytes().splitlines(keepends=True)
    records.write_bytes(whole[0] + whole[1][:40] + b"\n" + whole[1] + whole[0][:50])
    with (tmp_path / WORKLOAD_FILE).open("ab") as f:
        f.write(b'["123","FzUAAA')
    with pytest.raises(Exception):  # noqa: B017, PT011 - TVM's reader: any error
        ms.database.JSONDatabase(work_dir=str(tmp_path))

    again = TuningDatabase(tmp_path)
    assert len(again.database) == 2
    _commit(again, _module(3), 3)
    plain = ms.database.JSONDatabase(work_dir=str(tmp_path))
    ids = sorted(round(float(r.run_secs[0]) * 1e9) for r in plain.get_all_tuning_records())
    assert ids == [1, 2, 3]
