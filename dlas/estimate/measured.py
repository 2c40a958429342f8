"""Stage costs this workspace has measured: cache entries' seconds, with what they were.

Every computed cache entry's meta.json holds `seconds` (how long computing it took) and
stage facts (train: MACs; compile: conv count, tuning trials and seconds). What an entry
*was* (which model, compression, algorithm) is not in its meta; the results database is
where a point's full config lives, so each row is rebuilt into its point and the point's
stage keys find its entries. Entries no row leads to (an interrupted point, a result
database deleted) are not used, and neither are rows whose options are no longer
registered or whose option versions changed (their keys would not match anyway).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas.estimate.costmodel import components
from dlas.estimate.work import StageWork, stage_work
from dlas.results.store import read_point_configs
from dlas.sweep.grid import Point

#: Statuses of rows whose points a run skips unless `--retry-failed`.
FAILED = frozenset({"failed", "verification_failed"})


@dataclass(frozen=True)
class Measured:
    """One computed cache entry: its work and its measured seconds per cost component."""

    work: StageWork
    seconds: dict[str, float] = field(hash=False)
    #: The built-in model's components for the same work (the denominators of rescaling).
    builtin: dict[str, float] = field(hash=False)


@dataclass(frozen=True)
class WorkspaceRecord:
    """What a workspace says about costs: measured entries and points that failed."""

    measured: tuple[Measured, ...]
    failed_points: frozenset[str]


def point_from_config(config: dict[str, Any]) -> Point | None:
    """The point a row's stored config describes, or None when it cannot be rebuilt
    here (an option not registered, another option version, budgets of another schema)."""
    from dlas import registry
    from dlas.sweep.config import Budgets
    from dlas.sweep.grid import Choice, runtime_choice

    try:
        stored = config["choices"]
        choices: dict[str, Choice] = {}
        for layer in registry.LAYERS:
            identity = stored[layer]
            if layer == "algorithms" and identity.get("version") == "baseline":
                continue  # the baseline stand-in, rebuilt from the tuning choice below
            option = registry.get(layer, identity["name"])
            if option.version != identity["version"]:
                return None
            choices[layer] = Choice(option, option.parse_params(identity["params"]))
        if "algorithms" not in choices:
            choices["algorithms"] = runtime_choice(choices["tuning"])
        ordered = {layer: choices[layer] for layer in registry.LAYERS}
        return Point(choices=ordered, budgets=Budgets.model_validate(config["budgets"]))
    except Exception:  # noqa: BLE001 - any row that does not rebuild is simply not used
        return None


def _components(stage: str, meta: dict[str, Any]) -> dict[str, float] | None:
    seconds = meta.get("seconds")
    if not isinstance(seconds, int | float) or seconds < 0:
        return None
    noise = meta.get("noise")
    if stage in ("measure", "baseline") and isinstance(noise, dict):
        # waiting out other processes' load (and re-taking what they disturbed) belongs
        # to that moment, not to the stage: learn the quiet-machine cost
        extra = noise.get("extra_s")
        if isinstance(extra, int | float) and 0 < extra <= seconds:
            seconds -= extra
    timing = meta.get("timing")
    if stage in ("measure", "baseline") and isinstance(timing, dict):
        # the same for a timing worker's run, whose seconds are its group's share
        waited = sum(float(e.get("waited_s") or 0.0) for e in timing.get("events") or ()
                     if isinstance(e, dict))
        members = int((meta.get("computed_by") or {}).get("interleaved") or 1)
        if 0 < waited / members <= seconds:
            seconds -= waited / members
    if stage == "compile":
        tuning = float(meta.get("tuning_s") or 0.0)
        return {"compile": max(float(seconds) - tuning, 0.0), "tuning": tuning}
    return {stage: float(seconds)}


def load_workspace(cache_root: Path, db_path: Path) -> WorkspaceRecord:
    """Every measured entry of the workspace that a result row leads to."""
    from dlas.stages import stage_keys

    measured: list[Measured] = []
    failed: set[str] = set()
    seen: set[tuple[str, str]] = set()
    for point_key, status, config_json in read_point_configs(db_path):
        if status in FAILED:
            failed.add(point_key)
        try:
            point = point_from_config(json.loads(config_json or "null") or {})
        except json.JSONDecodeError:
            point = None
        if point is None or point.blocked:
            continue
        try:
            keys = stage_keys(point)
        except Exception:  # noqa: BLE001, S112 - e.g. a target that does not resolve here
            continue
        for stage, key in keys.items():
            meta_path = cache_root / stage / key / "meta.json"
            if stage == "data" or (stage, key) in seen or not meta_path.is_file():
                continue
            seen.add((stage, key))
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            seconds = _components(stage, meta)
            if seconds is None:
                continue
            work = stage_work(point, stage, key, facts=meta)
            measured.append(Measured(work, seconds, components(work)))
    return WorkspaceRecord(tuple(measured), frozenset(failed))
