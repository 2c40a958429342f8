"""A point's target option resolved to its concrete `TargetSpec`, once per process
(host detection reads /proc and asks LLVM; every stage key and constraint needs it)."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from dlas import registry
from dlas.targets.base import TargetSpec
from dlas.targets.host import CPUINFO_ENV


@functools.cache
def _resolve_cached(identity_json: str, cpuinfo_as: str | None) -> TargetSpec:
    """`cpuinfo_as`: DLAS_CPUINFO, which changes what `host` resolves to."""
    identity = json.loads(identity_json)
    option = registry.get("targets", identity["name"])
    return option.fn(option.parse_params(identity["params"]))


def resolve_target(point: Any) -> TargetSpec:
    """The target's concrete spec for a sweep point (`dlas.sweep.grid.Point`); keyed by
    the choice's identity (name, version, params), which each choice computes once."""
    return _resolve_cached(point.targets.identity_json, os.environ.get(CPUINFO_ENV))
