"""Expand a sweep into points: the cartesian product of its layers, minus what cannot run.

A point that cannot run stays in the grid with the reason, so `dlas plan` and the results
show it rather than silently dropping it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from dlas import registry
from dlas.sweep.config import Budgets, SweepConfig


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Choice:
    """One resolved option on one layer: the registered option and its validated params."""

    option: registry.Option
    params: BaseModel

    @property
    def name(self) -> str:
        return self.option.name

    @property
    def layer(self) -> str:
        return self.option.layer

    @property
    def tags(self) -> frozenset[str]:
        return self.option.tags

    def identity(self) -> dict[str, Any]:
        """What the cache keys see: name, version and every parameter value."""
        return {
            "name": self.option.name,
            "version": self.option.version,
            "params": self.params.model_dump(mode="json"),
        }

    @property
    def label(self) -> str:
        set_params = self.params.model_dump(mode="json", exclude_defaults=True)
        if not set_params:
            return self.option.name
        inner = ",".join(f"{k}={v}" for k, v in sorted(set_params.items()))
        return f"{self.option.name}({inner})"


@dataclass
class Point:
    """One combination of options (one per layer) with the sweep's budgets."""

    choices: dict[str, Choice]
    budgets: Budgets
    blocked: str | None = None
    index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, layer: str) -> Choice:
        # point.models, point.compression, ... read naturally in constraints
        choices = self.__dict__.get("choices", {})
        if layer in choices:
            return choices[layer]
        raise AttributeError(layer)

    @property
    def key(self) -> str:
        return digest({
            "choices": {layer: c.identity() for layer, c in self.choices.items()},
            "budgets": self.budgets.model_dump(mode="json"),
        })

    def labels(self) -> dict[str, str]:
        return {layer: c.label for layer, c in self.choices.items()}

    def describe(self) -> str:
        return " / ".join(self.labels().values())


def _matches(rule: dict[str, str | list[str]], choices: dict[str, Choice]) -> bool:
    for layer, names in rule.items():
        allowed = [names] if isinstance(names, str) else names
        if choices[layer].name not in allowed:
            return False
    return True


def expand(config: SweepConfig) -> list[Point]:
    """All points of the sweep, in layer order; blocked ones carry their reason."""
    per_layer: list[list[Choice]] = []
    for layer in registry.LAYERS:
        choices = []
        for spec in config.options(layer):
            option = registry.get(layer, spec.name)
            choices.append(Choice(option, option.parse_params(spec.params)))
        per_layer.append(choices)

    points = []
    for index, combo in enumerate(itertools.product(*per_layer)):
        choices = dict(zip(registry.LAYERS, combo, strict=True))
        point = Point(choices=choices, budgets=config.budgets, index=index)
        for i, rule in enumerate(config.exclude):
            if _matches(rule, choices):
                point.blocked = f"excluded by the sweep's exclude rule #{i + 1} ({rule})"
                break
        if point.blocked is None:
            for choice in combo:
                reason = choice.option.cannot_run(point)
                if reason:
                    point.blocked = f"{choice.layer} '{choice.name}': {reason}"
                    break
        points.append(point)
    return points
