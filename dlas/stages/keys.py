"""The keys that address a point's stage outputs in the cache.

A key is the digest of the stage's name and version, its parent's key and the stage's own
`key_inputs`: exactly what its output depends on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlas.sweep.grid import Point, digest

if TYPE_CHECKING:
    from dlas.stages.base import Stage


def stage_key(stage: Stage[Any], point: Point, parent_key: str | None) -> str:
    inputs = stage.key_inputs(point)
    if stage.parent_field:
        inputs[stage.parent_field] = parent_key
    return digest({"stage": stage.name, "stage_version": stage.version, **inputs})


@dataclass(frozen=True)
class StageKeys:
    """A point's stages, in graph order, with their keys."""

    keys: tuple[tuple[str, str], ...]

    def __getitem__(self, stage: str) -> str:
        for name, key in self.keys:
            if name == stage:
                return key
        raise KeyError(f"this point has no '{stage}' stage")

    def get(self, stage: str) -> str | None:
        return dict(self.keys).get(stage)

    def items(self) -> list[tuple[str, str]]:
        return list(self.keys)

    # the stages by name ("" where the point has no such stage)
    data = property(lambda self: self.get("data") or "")
    train = property(lambda self: self.get("train") or "")
    compress = property(lambda self: self.get("compress") or "")
    import_ = property(lambda self: self.get("import") or "")
    compile = property(lambda self: self.get("compile") or "")
    measure = property(lambda self: self.get("measure") or "")
    baseline = property(lambda self: self.get("baseline") or "")

    @property
    def last(self) -> str:
        """The stage whose output is the point's result (measure or baseline)."""
        return self.keys[-1][0]


def point_stages(point: Point) -> tuple[Stage[Any], ...]:
    """The stages a point runs: a baseline point's runtime replaces compile and measure."""
    from dlas.stages import BASELINE, COMPILE, COMPRESS, DATA, IMPORT, MEASURE, TRAIN

    tail = (BASELINE,) if point.is_baseline else (COMPILE, MEASURE)
    return (DATA, TRAIN, COMPRESS, IMPORT, *tail)


def stage_keys(point: Point) -> StageKeys:
    keys: list[tuple[str, str]] = []
    parent: str | None = None
    for stage in point_stages(point):
        parent = stage_key(stage, point, parent)
        keys.append((stage.name, parent))
    return StageKeys(tuple(keys))
