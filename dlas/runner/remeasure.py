"""Time again the points whose stored timing is flagged noisy, without recompiling them.

The measure stage re-takes samples taken on a busy machine only within the sweep's budget
(`dlas.measure.sampling`); what stays noisy is cached like any result, so an ordinary re-run
reuses it. `dlas run --remeasure-noisy` drops those timings (the `measure` entry of a TVM
point, the `baseline` entry of a baseline point) before the run, which then verifies and
times them again from the cached compiled module, on a machine that is hopefully quieter.
"""

from __future__ import annotations

from pathlib import Path

from dlas.results.store import ResultStore
from dlas.runner.cache import Cache
from dlas.stages import stage_keys
from dlas.sweep.config import SweepConfig
from dlas.sweep.grid import Point, expand


def forget_noisy_timings(config: SweepConfig, db_path: Path, cache: Cache) -> list[Point]:
    """Drop the cached timing of every point of `config` whose row is ok but noisy; return
    those points. Rows stay until the run rewrites them."""
    if not Path(db_path).exists():
        return []
    dropped = []
    with ResultStore(db_path) as store:
        for point in expand(config):
            if point.blocked:
                continue
            row = store.get(point.key)
            if row is None or row["status"] != "ok" or not row.get("noisy"):
                continue
            keys = stage_keys(point)
            stage, key = ("baseline", keys.baseline) if point.is_baseline else (
                "measure", keys.measure)
            if cache.discard(stage, key):
                dropped.append(point)
    return dropped
