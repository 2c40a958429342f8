"""MetaSchedule's JSON database, safe for several processes and nodes tuning into it.

TVM's `JSONDatabase` (src/s_tir/meta_schedule/database/json_database.cc) keeps two tables
as files of one JSON value a line: `database_workload.json`, a workload a line, whose
index is its line number, and `database_tuning_record.json`, `[workload index, record]`
a line. It reads both once, when made, and on each commit appends a line with a plain
`std::ofstream(path, app) << line << std::endl`. Two processes committing into one
directory break it in two ways:

* torn lines: the append is no single write (a workload line is tens of KB, more than
  the stream's buffer), and on NFS O_APPEND is no atomic append at all, so one
  process's line can land inside another's; TVM then fails to read the whole table;
* records filed under the wrong workload: a new workload's index is the size of *the
  committing process's* table, not its line number in the file. Two processes that
  each add a workload both give it index n; only one of them is line n, so the other's
  records name another workload (whose module their trace was not made for) or an
  index past the end (and the table no longer loads).

`SharedJSONDatabase` keeps the same two files in the same format (TVM, and dlas before
it, read them as before) and fixes both:

* every append happens under the directory's exclusive lock (`locks.exclusive`), as one
  `write` of a whole line, after cutting off a partial last line a dead writer may have
  left (the next reader would fail on it; it is logged, and is lost anyway);
* a record is written with its workload's line number *in the shared file*: a new
  workload is looked up there (by its line's bytes, among the lines other processes
  appended since) and appended only if missing, and the record line names that line.

The lines themselves are TVM's: an in-process `JSONDatabase` over a private copy of
the tables does the (de)serialisation, the in-memory index and every query, and each
line it appends to its private files is moved to the shared ones with its workload
index translated. The private copy is made from the shared tables under the lock,
without duplicate workload lines (which concurrent writers used to leave, and which
make TVM's own numbering ambiguous) and without lines that do not parse (a torn line
left by an older dlas: dropped with a warning, with the records that name it).

Like `JSONDatabase`, a process reads the tables once: records other processes commit
later are in the files, not in this process's view, until the database is opened again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms
from tvm_ffi import structural_equal, structural_hash

from dlas.tuning.metaschedule.locks import exclusive

log = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
#: A tuning-record line starts with its workload's index (TVM's JSONDumps, no spaces).
_RECORD_LINE = re.compile(rb"^\[(\d+),")
_CHUNK = 1 << 16


def _digest(line: bytes) -> bytes:
    """A workload line's identity: equal bytes, equal workload."""
    return hashlib.blake2b(line, digest_size=16).digest()


def trim_torn_tail(path: Path) -> int:
    """Cut a partial last line (a writer died, or is an older dlas writing without the
    lock) off `path`, so the next append starts a line of its own and readers do not
    fail on it. Call with the directory's lock held. Returns the bytes cut."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        end, pos = 0, size
        while pos > 0:
            start = max(0, pos - _CHUNK)
            f.seek(start)
            newline = f.read(pos - start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            pos = start
        f.truncate(end)
    log.warning("tuning database %s: cut a partial last line of %d bytes (a writer "
                "stopped mid-line)", path, size - end)
    return size - end


def _append_line(path: Path, line: bytes) -> None:
    """Append one whole line (the caller holds the directory's lock)."""
    trim_torn_tail(path)
    data = line + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _lines(data: bytes) -> list[bytes]:
    """Lines as TVM's reader (`std::getline`) splits them: at newlines only (not at
    the carriage returns `bytes.splitlines` also splits at); a partial last line is
    left out."""
    return data.split(b"\n")[:-1]


def _read_lines(path: Path) -> tuple[list[bytes], int]:
    """The complete lines of `path` (without newlines) and the bytes they span."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1
    return _lines(data[:end]), end


def _parses(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


@derived_object
class SharedJSONDatabase(ms.database.PyDatabase):
    """TVM's JSON database of `work_dir`, whose commits are safe while other processes
    (on this node or others, over NFS) commit into the same directory."""

    def __init__(self, work_dir: str | Path) -> None:
        self.work_dir = Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.path_workload = self.work_dir / WORKLOAD_FILE
        self.path_tuning_record = self.work_dir / RECORD_FILE
        self._mutex = threading.RLock()
        self._private = Path(tempfile.mkdtemp(prefix="dlas-msdb-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._private), True)
        self._private_workload = self._private / WORKLOAD_FILE
        self._private_record = self._private / RECORD_FILE
        #: The shared workload table as far as this process has read it: a line's digest
        #: -> its first line number, the lines and bytes read.
        self._shared_index: dict[bytes, int] = {}
        self._shared_lines = 0
        self._shared_offset = 0
        #: The private table's workload index -> the shared line it came from.
        self._private_to_shared: list[int] = []
        #: Workloads this process added: structural hash -> [(module, shared line)].
        self._added: dict[int, list[tuple[tvm.IRModule, int]]] = {}
        self._db = self._load()

    # --- loading -----------------------------------------------------------------------

    def _load(self) -> ms.database.JSONDatabase:
        with exclusive(self.work_dir):
            trim_torn_tail(self.path_workload)
            trim_torn_tail(self.path_tuning_record)
            workloads, self._shared_offset = _read_lines(self.path_workload)
            records, records_end = _read_lines(self.path_tuning_record)
        self._shared_lines = len(workloads)
        try:
            db, broken = self._open_private(workloads, records, check=False)
        except Exception as err:  # noqa: BLE001 - a line TVM cannot read: find and drop it
            log.warning("tuning database %s: a line does not parse (%s); reading it line "
                        "by line", self.work_dir, str(err).strip().splitlines()[-1:])
            db, broken = self._open_private(workloads, records, check=True)
        for path in (self._private_workload, self._private_record):
            os.truncate(path, 0)  # in memory now; the files collect new lines only
        if broken:
            self._drop_record_lines(records, records_end, broken)
        return db

    def _drop_record_lines(self, records: list[bytes], end: int, broken: set[int]) -> None:
        """Rewrite the shared record table without its `broken` lines (among the first
        `end` bytes, as read), so TVM's own reader loads it again. Appends since the
        reading are kept; if those bytes changed otherwise (another process opening the
        database repaired them first), it is left as it is."""
        read = b"".join(line + b"\n" for line in records)
        with exclusive(self.work_dir):
            current = self.path_tuning_record.read_bytes()
            if current[:end] != read:  # another process repaired it meanwhile
                return
            since = current[end:]
            kept = b"".join(line + b"\n" for i, line in enumerate(records) if i not in broken)
            tmp = self.path_tuning_record.with_name(
                f".{RECORD_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "wb") as f:
                f.write(kept + since)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path_tuning_record)
        log.warning("tuning database %s: %d unreadable tuning record line(s) removed from "
                    "%s", self.work_dir, len(broken), RECORD_FILE)

    def _open_private(self, workloads: list[bytes], records: list[bytes], check: bool,
                      ) -> tuple[ms.database.JSONDatabase, set[int]]:
        """The private copy of the shared tables, opened: workload lines deduplicated
        (and with `check`, lines that do not parse dropped), record lines renumbered.
        Also the record lines no reader can use (no workload index, one past the table,
        or with `check`, no JSON), by line number."""
        self._shared_index, self._private_to_shared = {}, []
        private_of: list[int | None] = []  # shared line -> private index
        unique: list[bytes] = []
        for i, line in enumerate(workloads):
            digest = _digest(line)
            first = self._shared_index.get(digest)
            if first is not None:
                private_of.append(private_of[first])
            elif check and not _parses(line):
                private_of.append(None)
            else:
                self._shared_index[digest] = i
                private_of.append(len(unique))
                unique.append(line)
                self._private_to_shared.append(i)
        kept: list[bytes] = []
        broken: set[int] = set()
        for n, line in enumerate(records):
            match = _RECORD_LINE.match(line)
            index = int(match.group(1)) if match else -1
            if not 0 <= index < len(private_of) or (check and not _parses(line)):
                broken.add(n)
                continue
            private = private_of[index]
            if private is None:  # names a workload line that does not parse
                continue
            kept.append(b"[%d," % private + line[match.end():])
        if len(unique) < len(workloads):
            log.debug("tuning database %s: %d duplicate or unreadable workload line(s)",
                      self.work_dir, len(workloads) - len(unique))
        if len(kept) < len(records):
            log.warning("tuning database %s: %d tuning record line(s) skipped (unreadable, "
                        "or naming no readable workload)", self.work_dir,
                        len(records) - len(kept))
        self._private_workload.write_bytes(b"".join(line + b"\n" for line in unique))
        self._private_record.write_bytes(b"".join(line + b"\n" for line in kept))
        return ms.database.JSONDatabase(str(self._private_workload),
                                        str(self._private_record),
                                        module_equality="structural"), broken

    # --- writing -----------------------------------------------------------------------

    def _take(self, path: Path) -> list[bytes]:
        """The lines the private database appended to `path` since the last call."""
        data = path.read_bytes()
        if not data:
            return []
        os.truncate(path, 0)
        return _lines(data)

    def _read_shared_workloads(self) -> None:
        """Index the workload lines other processes appended since the last reading
        (the caller holds the lock)."""
        trim_torn_tail(self.path_workload)
        try:
            size = self.path_workload.stat().st_size
        except FileNotFoundError:
            size = 0
        if size < self._shared_offset:
            raise RuntimeError(f"tuning database {self.work_dir}: {WORKLOAD_FILE} shrank "
                               "while in use (removed or replaced by hand?)")
        if size == self._shared_offset:
            return
        with open(self.path_workload, "rb") as f:
            f.seek(self._shared_offset)
            data = f.read(size - self._shared_offset)
        data = data[:data.rfind(b"\n") + 1]  # whole lines only (trimmed above anyway)
        for line in _lines(data):
            self._shared_index.setdefault(_digest(line), self._shared_lines)
            self._shared_lines += 1
        self._shared_offset += len(data)

    def _publish_workload(self, line: bytes) -> int:
        """The workload's line number in the shared table, appending it if missing (the
        caller holds the lock)."""
        self._read_shared_workloads()
        digest = _digest(line)
        index = self._shared_index.get(digest)
        if index is None:
            _append_line(self.path_workload, line)
            index = self._shared_index[digest] = self._shared_lines
            self._shared_lines += 1
            self._shared_offset += len(line) + 1
        return index

    def _shared_line_of(self, workload: ms.database.Workload, private_index: int) -> int:
        if self._added:
            for mod, index in self._added.get(structural_hash(workload.mod), []):
                if structural_equal(mod, workload.mod):
                    return index
        if private_index < len(self._private_to_shared):
            return self._private_to_shared[private_index]
        raise RuntimeError(f"tuning database {self.work_dir}: a record names workload "
                           f"{private_index}, which this process never committed")

    # --- the Database interface --------------------------------------------------------

    def has_workload(self, mod: tvm.IRModule) -> bool:
        return self._db.has_workload(mod)

    def commit_workload(self, mod: tvm.IRModule) -> ms.database.Workload:
        with self._mutex:
            workload = self._db.commit_workload(mod)
            lines = self._take(self._private_workload)
            if lines:  # new to this process: find it in the shared table, or add it
                with exclusive(self.work_dir):
                    index = [self._publish_workload(line) for line in lines][-1]
                self._added.setdefault(structural_hash(workload.mod), []).append(
                    (workload.mod, index))
            return workload

    def commit_tuning_record(self, record: ms.database.TuningRecord) -> None:
        with self._mutex:
            self._db.commit_tuning_record(record)
            out = []
            for line in self._take(self._private_record):
                match = _RECORD_LINE.match(line)
                if match is None:
                    raise RuntimeError(f"unexpected tuning record line: {line[:80]!r}")
                index = self._shared_line_of(record.workload, int(match.group(1)))
                out.append(b"[%d," % index + line[match.end():])
            if out:
                with exclusive(self.work_dir):
                    for line in out:
                        _append_line(self.path_tuning_record, line)

    def get_top_k(self, workload: ms.database.Workload,
                  top_k: int) -> list[ms.database.TuningRecord]:
        return self._db.get_top_k(workload, top_k)

    def get_all_tuning_records(self) -> list[ms.database.TuningRecord]:
        return self._db.get_all_tuning_records()

    def query_tuning_record(self, mod: tvm.IRModule, target: tvm.target.Target,
                            workload_name: str | None = None,
                            ) -> ms.database.TuningRecord | None:
        return self._db.query_tuning_record(mod, target, workload_name or "main")

    def query_schedule(self, mod: tvm.IRModule, target: tvm.target.Target,
                       workload_name: str | None = None) -> tvm.s_tir.Schedule | None:
        return self._db.query_schedule(mod, target, workload_name or "main")

    def query_ir_module(self, mod: tvm.IRModule, target: tvm.target.Target,
                        workload_name: str | None = None) -> tvm.IRModule | None:
        return self._db.query_ir_module(mod, target, workload_name or "main")

    def __len__(self) -> int:
        return len(self._db)
