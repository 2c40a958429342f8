"""The report's per-layer profiles, loaded: each reported timed point with the profile of
its row's *current* timing entry (`dlas.results.profiles`), grouped by model. A profile of
an earlier timing describes code the row no longer reports, so it is not used (and is
counted as stale).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from dlas.profile.limits import MachineLimits
from dlas.report.data import NCHW, RUNTIME_NAMES, ReportPoint
from dlas.report.tables import COMPRESSION_ORDER, FAMILY_ORDER, short
from dlas.results.layer_profile import PointProfile

# -- loading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelKey:
    """What one set of charts covers: a model on one platform for one dataset."""

    dataset: str
    platform: str
    model_label: str

    @property
    def title(self) -> str:
        return f"{self.model_label} ({self.dataset}, {self.platform})"

    @property
    def slug(self) -> str:
        """A file-name stem for its figures."""
        text = f"{self.dataset}-{self.model_label}-{self.platform}".lower()
        return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:80]


@dataclass(frozen=True)
class ProfiledPoint:
    """A reported point with the stored profile of its current timing entry."""

    point: ReportPoint
    timing_key: str
    profile: PointProfile
    #: The limits its layers were placed against; None when not measured or unreadable.
    limits: MachineLimits | None

    @property
    def model(self) -> ModelKey:
        return ModelKey(self.point.dataset, self.point.platform, self.point.model_label)

    @property
    def label(self) -> str:
        """compression / algorithm (with its layout when not NCHW) / tuning, or
        compression / runtime for a baseline."""
        p = self.point
        if p.baseline:
            return f"{short(p.compression)} / {RUNTIME_NAMES.get(p.tuning, p.tuning)}"
        return f"{short(p.compression)} / {p.algorithm_label} / {p.tuning_label}"


@dataclass
class LoadedProfiles:
    """The profiles of a report's points, and what could not be used."""

    points: list[ProfiledPoint] = field(default_factory=list)
    #: Reported timed points (each key once).
    timed: int = 0
    #: Points whose stored profile belongs to an earlier timing entry (not shown).
    stale: int = 0
    #: Profiles whose stored limits this version cannot read (no roofline for them).
    unreadable_limits: int = 0


def parse_limits(raw: dict | None) -> MachineLimits | None:
    """The stored limits as `MachineLimits`; None when absent or of another schema."""
    if raw is None:
        return None
    try:
        return MachineLimits.model_validate(raw)
    except ValidationError:
        return None


def _sort_key(p: ReportPoint) -> tuple:
    """Dense before compressed, untuned before tuned, the paper's algorithm order,
    baselines after TVM: the order bars and tables list points in."""
    comp = COMPRESSION_ORDER.index(p.compression) if p.compression in COMPRESSION_ORDER \
        else len(COMPRESSION_ORDER)
    fam = FAMILY_ORDER.index(p.family) if p.family in FAMILY_ORDER else len(FAMILY_ORDER)
    return (p.baseline, p.tuned, p.tuning, comp, p.compression, fam, p.algorithm,
            p.layout != NCHW, p.layout, p.key)


def load_profiles(db_path: Path, points: Iterable[ReportPoint]) -> LoadedProfiles:
    """The stored profile of each reported timed point, looked up by its row's point key
    and *current* timing key; in `_sort_key` order."""
    from dlas.results.profiles import has_profiles, load_profile, profiled_entries
    from dlas.results.store import ResultStore

    timed = {p.key: p for p in points if p.is_timed}
    out = LoadedProfiles(timed=len(timed))
    with ResultStore(db_path) as store:
        if not timed or not has_profiles(store.conn):
            return out
        stored = profiled_entries(store.conn)
        profiled_keys = {key for key, _ in stored}
        current = store.timing_keys()
        for key, point in timed.items():
            timing_key = current.get(key)
            if (key, timing_key) not in stored:
                out.stale += key in profiled_keys
                continue
            loaded = load_profile(store.conn, key, str(timing_key))
            if loaded is None:
                continue
            profile, raw_limits = loaded
            limits = parse_limits(raw_limits)
            out.unreadable_limits += raw_limits is not None and limits is None
            out.points.append(ProfiledPoint(point, str(timing_key), profile, limits))
    out.points.sort(key=lambda item: _sort_key(item.point))
    return out


def by_model(points: Iterable[ProfiledPoint]) -> dict[ModelKey, list[ProfiledPoint]]:
    """Profiled points per model, models in name order, points in their given order."""
    out: dict[ModelKey, list[ProfiledPoint]] = {}
    for item in points:
        out.setdefault(item.model, []).append(item)
    return {k: out[k] for k in sorted(out, key=lambda m: (m.dataset, m.platform,
                                                          m.model_label))}


def unique_labels(points: list[ProfiledPoint]) -> list[str]:
    """Each point's label, numbered where two points of one chart would read the same
    (one compression under two parameter sets)."""
    counts = Counter(item.label for item in points)
    seen: Counter[str] = Counter()
    labels = []
    for item in points:
        seen[item.label] += 1
        labels.append(item.label if counts[item.label] == 1 else
                      f"{item.label} #{seen[item.label]}")
    return labels
