"""This machine's run-to-run drift, kept across workspaces: what `dlas.results.drift`
measures a row's next-run range from.

Every invocation adds, per timing entry and placement, the figure of the runs it took
(the row's rule over its passes, `dlas.runner.rows.keep_figure`; older records hold one
figure per run) to one small SQLite file per user (`$DLAS_DRIFT_RECORD`, default
`~/.cache/dlas/drift.sqlite`), keyed by the machine (CPU model and cores), the compiled
artifact (the timing entry's key: the same config gives the same key in any workspace)
and the vCPU placement. A pair is a figure and the next one of the same artifact in the
same placement taken by another invocation (another `dlas run` process): exactly the
"next independent run" a row's range is about. Only figures, never samples, are kept;
the record reads its latest `KEEP` figures per machine.

The record widens intervals only: no row's median reads it, so workspaces stay
independent in what they measure.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dlas.results.drift import Drift, estimate, prior
from dlas.user_cache import user_cache_dir

log = logging.getLogger(__name__)

#: This process's invocation: runs of one `dlas run` are not pairs of each other.
INVOCATION = uuid.uuid4().hex
#: When it started: the timing runs it took began after this.
INVOCATION_STARTED = time.time()
#: Figures per machine a drift estimate reads (the newest), so it follows the machine.
KEEP = 4000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS run_figures (
    machine TEXT NOT NULL, timing_key TEXT NOT NULL, run_id TEXT NOT NULL,
    runtime TEXT NOT NULL, placement TEXT NOT NULL, invocation TEXT NOT NULL,
    started_at REAL NOT NULL, median_ms REAL NOT NULL,
    PRIMARY KEY (machine, timing_key, run_id))
"""


def record_path() -> Path:
    explicit = os.environ.get("DLAS_DRIFT_RECORD")
    if explicit:
        return Path(explicit)
    return user_cache_dir() / "drift.sqlite"


@functools.cache
def this_machine() -> str:
    """'AMD EPYC family 25 model 17 x2': the CPU and the cores timings run on.

    Why the family and model: cloud hypervisors name every AMD EPYC generation "AMD EPYC"
    (Zen 1, 3, 4 and 5 all read so here), and their timings drift very differently
    (docs/timing.md: a Zen 5's invocations agreed to 1-3%, a Zen 4's to 5-9% median), so
    a record learned on one must not set another's next-run range."""
    from dlas.targets.host import available_cores, machine_cpuinfo_fields

    info = machine_cpuinfo_fields()  # the silicon's: drift is the host's, whatever
    # DLAS_CPUINFO makes the code paths
    model = info.get("model name") or info.get("Model") or info.get("Hardware") or "cpu"
    family, number = info.get("cpu family"), info.get("model")
    if family and number:
        model = f"{model} family {family} model {number}"
    return f"{model} x{available_cores()}"


@contextmanager
def _open(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    path = path or record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30.0)
    try:
        conn.execute(_SCHEMA)
        yield conn
        conn.commit()
    finally:
        conn.close()


def add_figure(timing_key: str, run_id: str, runtime: str, placement: str,
               started_at: float, median_ms: float, machine: str | None = None,
               invocation: str = INVOCATION, path: Path | None = None) -> None:
    """Keep one run's figure (again for the same run: replaced)."""
    if not (median_ms > 0 and math.isfinite(median_ms)):
        return
    with _open(path) as conn:
        conn.execute("INSERT OR REPLACE INTO run_figures VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (machine or this_machine(), timing_key, run_id, runtime, placement,
                      invocation, started_at, median_ms))


def next_run_log_ratios(runtime: str, machine: str | None = None,
                        path: Path | None = None, leave_out: str | None = INVOCATION
                        ) -> list[float]:
    """|log ratio| of every figure of `runtime` on this machine against the latest earlier
    figure of the same artifact in the same placement that another invocation took (each
    pass of an invocation pairs with the invocation before). The figures of `leave_out`
    (this process's own, by default) are not read: every row of one run rests on the
    same estimate, and none on its own runs."""
    path = path or record_path()
    if not path.exists():
        return []
    with _open(path) as conn:
        rows = conn.execute(
            "SELECT timing_key, placement, invocation, median_ms FROM ("
            " SELECT * FROM run_figures WHERE machine = ? ORDER BY started_at DESC LIMIT ?)"
            " WHERE runtime = ? ORDER BY started_at",
            (machine or this_machine(), KEEP, runtime)).fetchall()
    # per artifact and placement: the latest figure of the two latest invocations
    latest: dict[tuple[str, str], list[tuple[str, float]]] = {}
    out = []
    for key, placement, invocation, median in rows:
        if invocation == leave_out:
            continue
        seen = latest.setdefault((key, placement), [])
        other = next((m for inv, m in reversed(seen) if inv != invocation), None)
        if other is not None:
            out.append(abs(math.log(median / other)))
        seen[:] = [(inv, m) for inv, m in seen if inv != invocation][-1:] + [(invocation, median)]
    return out


def machine_drift(runtime: str, path: Path | None = None) -> Drift:
    """`runtime`'s drift on this machine, from the record (the prior until it has enough
    pairs; also when the record cannot be read)."""
    try:
        return estimate(runtime, next_run_log_ratios(runtime, path=path))
    except (OSError, sqlite3.Error) as exc:
        log.warning("drift record %s unreadable (%s): the prior is used", record_path(), exc)
        return prior(runtime)
