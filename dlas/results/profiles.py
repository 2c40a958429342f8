"""Per-layer profiles in the results database (`dlas.profile`).

Two tables beside the points:
- `layer_profiles`: one row per profiled timing entry (a point's `measure` or `baseline`
  entry): the `PointProfile` without its layers, and the machine limits its roofline
  used, as JSON.
- `profile_layers`: one row per layer, its columns the fields of `LayerTime`, so a
  researcher can query layers in SQL (`SELECT op, SUM(time_us) FROM profile_layers ...`).

A profile belongs to a timing entry, not only to a point: a point re-timed after it was
recompiled has another timing key, and its old profile is not shown for it.
"""

from __future__ import annotations

import json
import sqlite3
import time
import types
import typing
from typing import Any

from dlas.results.layer_profile import LayerTime, PointProfile

_SQL_TYPES = {int: "INTEGER", float: "REAL", str: "TEXT", bool: "INTEGER"}


def _sql_type(annotation: Any) -> str:
    """The column type of a LayerTime field: lists are JSON text."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if isinstance(annotation, types.UnionType) and args else annotation
    return _SQL_TYPES.get(base, "TEXT")


#: The layer table's columns: the entry it belongs to, then LayerTime's fields.
LAYER_COLUMNS = {name: _sql_type(field.annotation)
                 for name, field in LayerTime.model_fields.items()}

#: LayerTime fields stored as JSON text (lists).
_JSON_FIELDS = {name for name, field in LayerTime.model_fields.items()
                if "list" in str(field.annotation)}

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS layer_profiles (point_key TEXT NOT NULL, timing_key TEXT "
    "NOT NULL, created_at REAL, record TEXT, limits TEXT, PRIMARY KEY (point_key, "
    "timing_key))",
    "CREATE TABLE IF NOT EXISTS profile_layers (point_key TEXT NOT NULL, timing_key TEXT "
    "NOT NULL, " + ", ".join(f"{'layer_index' if n == 'index' else n} {t}"
                             for n, t in LAYER_COLUMNS.items())
    + ", PRIMARY KEY (point_key, timing_key, layer_index))",
)


def _column(name: str) -> str:
    return "layer_index" if name == "index" else name  # INDEX is an SQL keyword


def has_profiles(conn: sqlite3.Connection) -> bool:
    """Whether the database has profile tables at all: asked before `load_profile`, which
    would create them, so that a reader (the report) leaves a database without them as
    it was."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'layer_profiles'")
    return found.fetchone() is not None


def profiled_entries(conn: sqlite3.Connection) -> set[tuple[str, str]]:
    """(point key, timing key) of every stored profile."""
    return {(r[0], r[1]) for r in conn.execute(
        "SELECT point_key, timing_key FROM layer_profiles")}


def ensure_tables(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


def save_profile(conn: sqlite3.Connection, point_key: str, timing_key: str,
                 profile: PointProfile, limits: dict[str, Any] | None) -> None:
    """Store (replace) the profile of a point's timing entry."""
    ensure_tables(conn)
    header = profile.model_dump(exclude={"layers"})
    with conn:
        conn.execute("DELETE FROM profile_layers WHERE point_key = ? AND timing_key = ?",
                     (point_key, timing_key))
        conn.execute("INSERT OR REPLACE INTO layer_profiles VALUES (?, ?, ?, ?, ?)",
                     (point_key, timing_key, time.time(), json.dumps(header),
                      None if limits is None else json.dumps(limits)))
        names = list(LAYER_COLUMNS)
        marks = ", ".join("?" for _ in range(len(names) + 2))
        cols = ", ".join(["point_key", "timing_key", *map(_column, names)])
        for layer in profile.layers:
            values = [json.dumps(v) if isinstance(v, list) else v
                      for v in (getattr(layer, n) for n in names)]
            conn.execute(f"INSERT INTO profile_layers ({cols}) VALUES ({marks})",
                         (point_key, timing_key, *values))


def load_profile(conn: sqlite3.Connection, point_key: str,
                 timing_key: str) -> tuple[PointProfile, dict[str, Any] | None] | None:
    """The stored profile of a point's timing entry and its limits, or None."""
    ensure_tables(conn)
    cursor = conn.cursor()
    cursor.row_factory = sqlite3.Row  # on this cursor only: the caller's rows stay as they are
    head = cursor.execute("SELECT record, limits FROM layer_profiles WHERE point_key = ? AND "
                        "timing_key = ?", (point_key, timing_key)).fetchone()
    if head is None:
        return None
    layers = []
    for row in cursor.execute("SELECT * FROM profile_layers WHERE point_key = ? AND "
                            "timing_key = ? ORDER BY layer_index", (point_key, timing_key)):
        raw = {name: row[_column(name)] for name in LAYER_COLUMNS}
        for name in _JSON_FIELDS:
            if isinstance(raw[name], str):
                raw[name] = json.loads(raw[name])
        layers.append(LayerTime(**raw))
    profile = PointProfile(**json.loads(head["record"]), layers=layers)
    return profile, (json.loads(head["limits"]) if head["limits"] else None)
