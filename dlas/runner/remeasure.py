"""Time the points of a sweep again, without recompiling them.

`dlas run CONFIG --remeasure` is the paper's "repeat the experiment" in one command: it
drops the cached timing entry of every measured point (the `measure` entry of a TVM
point, the `baseline` entry of a baseline point), so the run times each of them again in
fresh timing workers, interleaved with their model's other variants, from the cached
compiled modules. Every timing run stays in the results database's history
(`timing_runs`); the rows' figures and intervals are computed over all of them and show
their spread. `--remeasure-noisy` does the same only for the rows flagged noisy.
"""

from __future__ import annotations

from pathlib import Path

from dlas.results.store import ResultStore
from dlas.runner.cache import Cache
from dlas.stages import stage_keys
from dlas.sweep.config import SweepConfig
from dlas.sweep.grid import Point, expand


def forget_timings(config: SweepConfig, db_path: Path, cache: Cache, *,
                   only_noisy: bool, fewer_runs_than: int | None = None,
                   only: frozenset[str] | None = None) -> list[Point]:
    """Drop the cached timing of every point of `config` whose row is ok (and noisy, with
    `only_noisy`; and pools fewer than `fewer_runs_than` timing runs, when given: the
    points a timing pass still owes a run, `dlas.runner.passes`; and whose key `only`
    holds, when given); return those points. Rows and timing history stay; the run
    rewrites the rows."""
    if not Path(db_path).exists():
        return []
    dropped = []
    with ResultStore(db_path) as store:
        for point in expand(config):
            if point.blocked or (only is not None and point.key not in only):
                continue
            row = store.get(point.key)
            if row is None or row.status != "ok" or (only_noisy and not row.noisy):
                continue
            if fewer_runs_than is not None and (row.timing_runs or 0) >= fewer_runs_than:
                continue
            keys = stage_keys(point)
            stage, key = keys.result
            if cache.discard(stage, key):
                dropped.append(point)
    return dropped
