"""A point's target option resolved to its concrete `TargetSpec`, once per process
(host detection reads /proc and asks LLVM; every stage key and constraint needs it)."""

from __future__ import annotations

import functools
import json
from typing import Any

from dlas import registry
from dlas.targets.base import TargetSpec


@functools.cache
def _resolve_cached(name: str, version: str, params_json: str) -> TargetSpec:
    option = registry.get("targets", name)
    return option.fn(option.parse_params(json.loads(params_json)))


def resolve_target(point: Any) -> TargetSpec:
    """The target's concrete spec for a sweep point (`dlas.sweep.grid.Point`)."""
    from dlas.sweep.grid import canonical_json

    choice = point.targets
    return _resolve_cached(choice.name, choice.option.version,
                           canonical_json(choice.identity()["params"]))
