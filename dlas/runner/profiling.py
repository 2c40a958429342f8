"""`dlas profile CONFIG`: the per-layer profile of every measured point of a sweep.

A profile is taken once per timing entry and stored (`dlas.results.profiles`); a point
whose stored profile belongs to its current timing entry is not profiled again (unless
`refresh`). Points are profiled in the timing worker (`dlas.runner.timing_groups`, mode
"profile"): a fresh process, threads pinned as when they were timed, the variants of one
model in one worker, the machine held exclusively as for any timing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas.results.layer_profile import PointProfile
from dlas.sweep.grid import Point


@dataclass
class ProfileOutcome:
    """A point of the sweep and its profile (None, with `error`, when it has none)."""

    point: Point
    row: Any
    timing_key: str
    profile: PointProfile | None = None
    limits: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class SweepProfiles:
    points: list[ProfileOutcome] = field(default_factory=list)
    #: Points profiled by this call (the rest came from the database).
    profiled: int = 0
    #: Points of the sweep without a measured row (never run, failed, not runnable).
    unmeasured: int = 0


def _timing_entry(point: Point) -> tuple[str, str]:
    from dlas.stages import stage_keys

    return stage_keys(point).result


def profile_sweep(config: Any, workspace: Any, *, refresh: bool = False,
                  note: Callable[[str], None] = lambda _t: None) -> SweepProfiles:
    """Profile the measured points of `config` that have no current profile; return
    every measured point with its profile."""
    from dlas.results.profiles import load_profile, save_profile
    from dlas.results.store import ResultStore
    from dlas.runner.timing_groups import group_key
    from dlas.sweep.grid import expand

    out = SweepProfiles()
    todo: dict[str, list[ProfileOutcome]] = {}
    with ResultStore(workspace.db_path) as store:
        for point in expand(config):
            row = None if point.blocked else store.get(point.key)
            if row is None or row.status != "ok":
                out.unmeasured += 1
                continue
            _, timing_key = _timing_entry(point)
            item = ProfileOutcome(point, row, timing_key)
            stored = None if refresh else load_profile(store.conn, point.key, timing_key)
            if stored is not None:
                item.profile, item.limits = stored
            else:
                todo.setdefault(group_key(point), []).append(item)
            out.points.append(item)
        for group in todo.values():
            _profile_group(group, workspace, note)
            for item in group:
                if item.profile is not None:
                    save_profile(store.conn, item.point.key, item.timing_key, item.profile,
                                 item.limits)
                    out.profiled += 1
    return out


def _profile_group(items: list[ProfileOutcome], workspace: Any,
                   note: Callable[[str], None]) -> None:
    """Profile one model's points in one timing worker; fill their profiles or errors."""
    from dlas.runner.machine import MachineLock
    from dlas.runner.timing_groups import (
        TimingMember,
        WorkerEvents,
        group_request,
        group_title,
        time_group,
    )
    from dlas.stages import result_stage, stage_keys
    from dlas.stages.timed import subject_label

    first = items[0].point
    note(f"profiling {group_title(first)}: {len(items)} point(s)")
    with tempfile.TemporaryDirectory(prefix="dlas-profile-") as tmp:
        members = []
        for i, item in enumerate(items):
            stage, _ = _timing_entry(item.point)
            work = Path(tmp) / str(i)
            work.mkdir()
            members.append(TimingMember(item.point, stage_keys(item.point), stage,
                                        subject_label(item.point), str(work)))
        request = group_request(first, members, str(workspace.root),
                                str(workspace.cache_dir), "profile", mode="profile")
        # the machine as the point's timing stage holds it (exclusively)
        resources = result_stage(first).resources_for(first)
        with MachineLock().hold(resources, lambda what: note(f"waiting: {what}")):
            results = time_group(request, WorkerEvents(note=note))
    for item, result in zip(items, results, strict=True):
        if result.meta is None:
            item.error = result.error or "not profiled"
            continue
        profile = PointProfile(**result.meta["profile"])
        profile.key = item.timing_key
        item.profile, item.limits = profile, result.meta.get("limits")
