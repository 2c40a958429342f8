"""The keys that address a point's stage outputs in the cache.

A key is the digest of the stage's name and version, the code that decides its output
(`stage_code`), its parent's key and the stage's own `key_inputs`: exactly what its output
depends on. `key_inputs` sees only the layers its stage declares in `reads`
(`Point.only`), so two points that agree on those layers and on the parent's key have the
same key by construction; `KeyMemo` uses that to compute each shared key of a large grid
once (48,000 points share 200 trained-and-compressed models).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlas.stages.chains import point_stages
from dlas.stages.code_version import (
    code_digest,
    library_versions,
    module_digest,
    plugin_code,
)
from dlas.sweep.grid import LayerView, Point, digest

if TYPE_CHECKING:
    from dlas.stages.base import Stage
    from dlas.sweep.config import Budgets


def stage_code(stage: Stage[Any], view: LayerView) -> dict[str, Any]:
    """What of the code decides the stage's output: its declared dlas code and its own
    module (a digest), its libraries' versions, and the modules of plugin options chosen
    on the layers it reads (`view`: the point reduced to them, `Point.only`;
    `dlas.stages.code_version`)."""
    module = type(stage).__module__
    own = (module.removeprefix("dlas."),) if module.startswith("dlas.") else ()
    out: dict[str, Any] = {"code": code_digest((*stage.code, *own))}
    if not own:  # a stage defined outside dlas: its own module's digest
        out["stage_module"] = module_digest(module)
    if stage.libraries:
        out["libraries"] = library_versions(stage.libraries)
    plugins = plugin_code(view.choices)
    if plugins:
        out["plugins"] = plugins
    return out


def stage_key(stage: Stage[Any], point: Point, parent_key: str | None) -> str:
    view = point.only(stage.reads, reader=f"stage '{stage.name}' key")
    inputs = stage.key_inputs(view)
    if stage.parent_field:
        inputs[stage.parent_field] = parent_key
    return digest({"stage": stage.name, "stage_version": stage.version,
                   **stage_code(stage, view), **inputs})


class KeyMemo:
    """Stage keys already computed, reused for every later point that agrees with an
    earlier one on what the key depends on: the stage, its parent's key, the choices of
    the layers it `reads` and the budgets (told apart by object: the memo keeps every
    budgets object it saw alive, so an id is never reused while it is in use)."""

    def __init__(self) -> None:
        self._keys: dict[tuple[str, str | None, int, tuple[str, ...]], str] = {}
        self._budgets: dict[int, Budgets] = {}
        #: Keys digested so far (the rest were reused).
        self.computed = 0

    def key(self, stage: Stage[Any], point: Point, parent_key: str | None) -> str:
        self._budgets.setdefault(id(point.budgets), point.budgets)
        memo = (stage.name, parent_key, id(point.budgets),
                tuple(point.choices[layer].identity_json for layer in stage.reads))
        key = self._keys.get(memo)
        if key is None:
            key = self._keys[memo] = stage_key(stage, point, parent_key)
            self.computed += 1
        return key


@dataclass(frozen=True)
class StageKeys:
    """A point's stages, in graph order, with their keys."""

    keys: tuple[tuple[str, str], ...]

    def __getitem__(self, stage: str) -> str:
        for name, key in self.keys:
            if name == stage:
                return key
        raise KeyError(f"this point has no '{stage}' stage")

    def __contains__(self, stage: object) -> bool:
        return any(name == stage for name, _ in self.keys)

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

    @property
    def result(self) -> tuple[str, str]:
        """The point's result stage (`last`) and its key: its timing entry."""
        return self.keys[-1]


def iter_stage_keys(point: Point, memo: KeyMemo | None = None,
                    stages: tuple[Stage[Any], ...] | None = None) -> Iterator[tuple[str, str]]:
    """The point's (stage, key) pairs in graph order, each computed when asked for: a
    caller that needs only the first stages' keys does not pay for the others. `stages`
    is `point_stages(point)` where the caller has it already."""
    parent: str | None = None
    for stage in stages or point_stages(point):
        parent = memo.key(stage, point, parent) if memo else stage_key(stage, point, parent)
        yield stage.name, parent


def stage_keys(point: Point, memo: KeyMemo | None = None) -> StageKeys:
    """Every stage key of the point; pass one `memo` for the points of one grid."""
    return StageKeys(tuple(iter_stage_keys(point, memo)))
