"""The results database: embedded SQLite, one typed row per point (`dlas.results.row`).

Three tables:
- `points`: one `ResultRow` per point key; its columns are the row's fields.
- `sweep_points`: which sweeps a point belongs to. Membership is many-to-many: a tuning
  sweep whose untuned and ONNX Runtime points the quickstart already measured lists them
  as its own (its report has its baselines), though their row was written once.
- `timing_runs`: every timing run of every point's timing entry (`TimingRun`, JSON), the
  sweep's and each `dlas run --remeasure`'s. The row's latency figures are computed over
  the runs of its current timing entry (`dlas.results.latency`), so repeating an
  experiment is one command and the spread across runs is kept.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from dlas.measure.record import TimingRun
from dlas.results.health import DamagedDatabaseError, check_database, is_damage
from dlas.results.row import COLUMNS, JSON_COLUMNS, STATUSES, ResultRow

__all__ = ["COLUMNS", "JSON_COLUMNS", "STATUSES", "SUMMARY_COLUMNS", "DamagedDatabaseError",
           "ResultRow", "ResultStore"]

#: Columns `dlas results --wide` shows (the default view is `BRIEF_COLUMNS` in
#: `dlas.runner.console`, one line a row; every column goes to CSV and JSON).
SUMMARY_COLUMNS = [
    "status", "model", "compression", "algorithm", "tuning", "target", "accuracy",
    "sparsity", "latency_median_ms", "latency_ci_ms", "next_run_ms", "placement", "threads",
    "verified", "max_abs_diff", "compile_s", "error",
]

_SCHEMA_EXTRA = (
    "CREATE TABLE IF NOT EXISTS sweep_points (sweep TEXT NOT NULL, point_key TEXT NOT NULL, "
    "added_at REAL, PRIMARY KEY (sweep, point_key))",
    "CREATE TABLE IF NOT EXISTS timing_runs (run_id TEXT NOT NULL, point_key TEXT NOT NULL, "
    "timing_key TEXT NOT NULL, started_at REAL, source TEXT, placement TEXT, record TEXT, "
    "PRIMARY KEY (run_id, point_key))",
    "CREATE INDEX IF NOT EXISTS timing_runs_key ON timing_runs (point_key, timing_key)",
)


def read_point_configs(db_path: Path) -> list[tuple[str, str, str]]:
    """Each row's (point key, status, stored config JSON), read without writing: the
    database is opened read-only and not created, so a reader (the estimate) leaves a
    workspace as it found it. A damaged database raises `DamagedDatabaseError` (an
    estimate from it would silently ignore what it measured); no database, an empty file
    or one without rows yet reads as no rows."""
    if not db_path.is_file():
        return []
    check_database(db_path)
    try:
        with sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True) as conn:
            return list(conn.execute("SELECT point_key, status, config FROM points"))
    except sqlite3.Error:
        return []


class ResultStore:
    """The database at `path`, created if absent. A file that is not a readable results
    database raises `DamagedDatabaseError` before anything is written to it
    (`dlas.results.health`), and so does damage SQLite finds later."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        check_database(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path)
        self.conn.row_factory = sqlite3.Row
        try:
            with self._guard():
                cols = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS points ({cols})")
                existing = {r["name"] for r in self.conn.execute("PRAGMA table_info(points)")}
                for name, kind in COLUMNS.items():  # older databases gain new columns
                    if name not in existing:
                        self.conn.execute(
                            f"ALTER TABLE points ADD COLUMN {name} {kind.split()[0]}")
                for statement in _SCHEMA_EXTRA:
                    self.conn.execute(statement)
                # rows written before membership existed belong to the sweep that wrote them
                self.conn.execute(
                    "INSERT OR IGNORE INTO sweep_points (sweep, point_key, added_at) "
                    "SELECT sweep, point_key, created_at FROM points WHERE sweep IS NOT NULL")
                self.conn.commit()
        except BaseException:
            self.conn.close()
            raise

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """SQLite's word for a damaged file, as `DamagedDatabaseError` (exit 2 with what
        to do; the file is left as it is)."""
        try:
            yield
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise DamagedDatabaseError(self.path, f"SQLite cannot read it: {exc}") from exc
            raise

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rows -------------------------------------------------------------------------

    def upsert(self, row: ResultRow, sweep: str | None = None) -> None:
        """Write `row` whole (stale fields of an earlier attempt do not survive) and
        make it a member of `sweep` (default: the row's own)."""
        if not isinstance(row, ResultRow):
            raise TypeError(f"upsert takes a ResultRow, not {type(row).__name__}")
        now = time.time()
        previous = self.conn.execute("SELECT created_at, sweep FROM points WHERE point_key = ?",
                                     (row.point_key,)).fetchone()
        values = row.model_dump()
        values["updated_at"] = now
        values["created_at"] = previous["created_at"] if previous else now
        if previous is not None and previous["sweep"]:  # the first sweep stays the writer
            values["sweep"] = previous["sweep"]
        encoded = {k: (json.dumps(v, default=str) if k in JSON_COLUMNS and v is not None else v)
                   for k, v in values.items()}
        names = list(encoded)
        self.conn.execute(
            f"INSERT OR REPLACE INTO points ({', '.join(names)}) "
            f"VALUES ({', '.join('?' for _ in names)})",
            [encoded[n] for n in names],
        )
        member = sweep or row.sweep
        if member:
            self.conn.execute("INSERT OR IGNORE INTO sweep_points (sweep, point_key, added_at) "
                              "VALUES (?, ?, ?)", (member, row.point_key, now))
        self.conn.commit()
        row.created_at, row.updated_at, row.sweep = (values["created_at"], now,
                                                     values["sweep"])

    def add_member(self, sweep: str, point_key: str) -> None:
        """Make an existing row a member of `sweep` (a point it lists but did not write)."""
        self.conn.execute("INSERT OR IGNORE INTO sweep_points (sweep, point_key, added_at) "
                          "VALUES (?, ?, ?)", (sweep, point_key, time.time()))
        self.conn.commit()

    def get(self, point_key: str) -> ResultRow | None:
        with self._guard():
            row = self.conn.execute("SELECT * FROM points WHERE point_key = ?",
                                    (point_key,)).fetchone()
        return self._decode(row) if row else None

    def rows(self, sweep: str | None = None, status: str | None = None) -> list[ResultRow]:
        """Rows in the order they were first written; `sweep`: its members only."""
        query, args = "SELECT points.* FROM points", []
        if sweep:
            query += (" JOIN sweep_points ON sweep_points.point_key = points.point_key "
                      "AND sweep_points.sweep = ?")
            args.append(sweep)
        query += " WHERE 1=1"
        if status:
            query += " AND status = ?"
            args.append(status)
        query += " ORDER BY points.created_at, points.rowid"
        with self._guard():
            return [self._decode(r) for r in self.conn.execute(query, args).fetchall()]

    def timing_keys(self) -> dict[str, str]:
        """Each row's current timing entry: {point key: timing key} (a profile belongs to
        one; `dlas.results.profiles`)."""
        return {r["point_key"]: r["timing_key"] for r in self.conn.execute(
            "SELECT point_key, timing_key FROM points")}

    def sweeps(self) -> list[str]:
        """Every sweep that has members."""
        return [str(r["sweep"]) for r in self.conn.execute(
            "SELECT DISTINCT sweep FROM sweep_points ORDER BY sweep")]

    def members(self, sweep: str) -> set[str]:
        return {str(r["point_key"]) for r in self.conn.execute(
            "SELECT point_key FROM sweep_points WHERE sweep = ?", (sweep,))}

    @staticmethod
    def _decode(row: sqlite3.Row) -> ResultRow:
        out: dict[str, Any] = {}
        for k in row.keys():  # noqa: SIM118 - sqlite3.Row has no __iter__ over names
            if k not in COLUMNS:  # a column of an older version, no longer a field
                continue
            value = row[k]
            if k in JSON_COLUMNS and value is not None:
                value = json.loads(value)
            out[k] = value
        if out.get("noise_log") is not None and not isinstance(out["noise_log"], dict):
            out["noise_log"] = {"legacy": out["noise_log"]}
        return ResultRow.model_validate(out)

    # -- timing history ---------------------------------------------------------------

    def add_timing_run(self, point_key: str, timing_key: str, run: TimingRun) -> bool:
        """Record a timing run of the point's timing entry; False if it was already."""
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO timing_runs (run_id, point_key, timing_key, started_at, "
            "source, placement, record) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (run.run_id, point_key, timing_key, run.started_at, run.source, run.placement,
             run.model_dump_json()))
        self.conn.commit()
        return cur.rowcount > 0

    def timing_runs(self, point_key: str, timing_key: str | None = None) -> list[TimingRun]:
        """The point's timing runs, oldest first (of one timing entry, if given)."""
        query = "SELECT record FROM timing_runs WHERE point_key = ?"
        args: list[Any] = [point_key]
        if timing_key is not None:
            query += " AND timing_key = ?"
            args.append(timing_key)
        query += " ORDER BY started_at, rowid"
        return [TimingRun.model_validate_json(r["record"])
                for r in self.conn.execute(query, args)]

    # -- export -----------------------------------------------------------------------

    def export_csv(self, path: Path, rows: Iterable[ResultRow] | None = None) -> int:
        rows = list(self.rows() if rows is None else rows)
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
            writer.writeheader()
            for row in rows:
                writer.writerow({k: (json.dumps(v) if k in JSON_COLUMNS and v is not None else v)
                                 for k, v in row.model_dump().items()})
        return len(rows)
