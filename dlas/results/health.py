"""Is `results.db` a readable dlas results database? Checked before anything writes to it.

A results database that disk trouble, a full file system or a stray copy damaged made
SQLite raise deep inside a command (a traceback, exit 1), and opening it for writing
would have added tables to whatever the file was. Every command that opens one checks it
first, reading only, and stops with `DamagedDatabaseError` (exit 2 at the command line):
the path, what is wrong and what to do. The file is left exactly as it was: it may still
be worth recovering (`sqlite3 results.db .recover`), and the rows can be rebuilt anyway,
since every cached point's row is written again by `dlas run` on its sweep config.

Kept free of heavy imports: the command line catches the error class.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: SQLite's result codes for a damaged file: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGE_CODES = {11, 26}
TABLE = "points"


class DamagedDatabaseError(RuntimeError):
    """The results database cannot be read as one; nothing was written to it."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        aside = self.path.with_name(self.path.name + ".damaged")
        super().__init__(
            f"{self.path}: the results database is damaged ({problem}); dlas left it "
            f"untouched. Move it aside (mv {self.path} {aside}) and run `dlas run CONFIG` "
            "(or `dlas reproduce ...`) again: a new database is written, and the rows of "
            "points whose stages are cached are rebuilt without computing them again "
            "(points that had failed are tried again). Or restore the file from a backup")


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether an SQLite error says the file is damaged (not, e.g., that it is locked)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _DAMAGE_CODES
    return type(exc) is sqlite3.DatabaseError  # no code: corrupt and not-a-db raise this


def check_database(path: Path) -> None:
    """Raise `DamagedDatabaseError` unless `path` is absent, empty (SQLite treats an empty
    file as a new database), or a readable SQLite database with a `points` table or no
    table at all. Reads only: the file is never changed. Errors that are not damage (a
    lock, a journal that a writer must roll back first) are left to the store."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    with open(path, "rb") as fh:
        header = fh.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        raise DamagedDatabaseError(path, "it is not an SQLite database: its first bytes are "
                                         "not SQLite's header")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise DamagedDatabaseError(path, f"it cannot be opened: {exc}") from exc
    try:
        problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            shown = "; ".join(str(p) for p in problems[:3])
            more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
            raise DamagedDatabaseError(path, f"SQLite's check finds: {shown}{more}")
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
    except sqlite3.Error as exc:
        if not is_damage(exc):
            return  # e.g. locked, or a hot journal to roll back: the store's own business
        raise DamagedDatabaseError(path, f"SQLite cannot read it: {exc}") from exc
    finally:
        conn.close()
    if tables and TABLE not in tables:
        raise DamagedDatabaseError(path, f"it is an SQLite database without a '{TABLE}' "
                                         f"table (it has {', '.join(sorted(tables))}), so not "
                                         "a dlas results database")
