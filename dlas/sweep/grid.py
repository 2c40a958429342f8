"""Expand a sweep into points: the cartesian product of its layers, minus what cannot run.

A point that cannot run stays in the grid with the reason, so `dlas plan` and the results
show it rather than silently dropping it.

A *baseline* tuning choice (an option tagged `baseline`, e.g. ONNX Runtime) runs the model
in another runtime, whose own kernels replace the conv algorithms: for it the algorithms
axis collapses to one stand-in choice named after the runtime, so the sweep measures the
baseline once per model/compression/target, not once per algorithm.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from dlas import registry
from dlas.registry import BASELINE_TAG
from dlas.sweep.config import Budgets, ConfigError, SweepConfig

#: Budgets read only when a result row is written (the noise flag's threshold): neither
#: stage keys nor point keys hash them, so changing one re-labels cached measurements
#: (the row is rewritten on the next run) instead of redoing them or adding rows.
ROW_ONLY_BUDGETS = frozenset({"ci_threshold"})
#: Budgets bounding how hard the timing worker tries for quiet, steadily placed samples
#: (rounds, re-takes, waiting for a busy machine or a placement): they change how long a
#: measurement may take and how tight its interval is, not what is measured, so no key
#: hashes them either, and a cached measurement is not redone when they change.
EFFORT_BUDGETS = frozenset({"noise_retries", "noise_budget_s", "timing_rounds",
                            "timing_passes", "placement_wait_s"})
#: Every budget outside the point key and the stage keys.
UNKEYED_BUDGETS = ROW_ONLY_BUDGETS | EFFORT_BUDGETS



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

    @functools.cached_property
    def identity_json(self) -> str:
        """`identity()` as canonical JSON, computed once: two choices are the same choice
        exactly when these are equal (what grids of many points compare and memoise on;
        validated params are never changed afterwards)."""
        return canonical_json(self.identity())

    @property
    def label(self) -> str:
        return registry.choice_label(self.option.name, self.params)


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
        # budgets that only shape the row (the noise threshold) or the effort spent on a
        # quiet machine are not part of what the point *is*: changing them re-labels the
        # same measurement, not a new point
        return digest({
            "choices": {layer: c.identity() for layer, c in self.choices.items()},
            "budgets": self.budgets.model_dump(mode="json", exclude=set(UNKEYED_BUDGETS)),
        })

    @property
    def is_baseline(self) -> bool:
        """Measured in a baseline runtime (PyTorch, ONNX Runtime), not compiled by TVM."""
        tuning = self.choices.get("tuning")
        return tuning is not None and BASELINE_TAG in tuning.tags

    def labels(self) -> dict[str, str]:
        return {layer: c.label for layer, c in self.choices.items()}

    def describe(self) -> str:
        return " / ".join(self.labels().values())

    def only(self, layers: tuple[str, ...], reader: str) -> LayerView:
        """This point reduced to the choices of `layers` and the budgets: what `reader`
        (a stage's key) may depend on. Reading any other layer from it raises
        `UndeclaredLayer`, so what a key reads cannot drift from what it declares, and
        the key can be shared by every point that agrees on those layers."""
        return LayerView(choices={layer: self.choices[layer] for layer in layers},
                         budgets=self.budgets, index=self.index, reader=reader)


class UndeclaredLayer(RuntimeError):
    """Code given a `LayerView` read a layer the view leaves out (a bug in that code's
    declaration, not in a config)."""


@dataclass
class LayerView(Point):
    """A point with some layers only (`Point.only`); the others raise when read."""

    reader: str = ""

    def _undeclared(self, what: str) -> UndeclaredLayer:
        return UndeclaredLayer(f"{self.reader} reads {what}, but declares only the layers "
                               f"{list(self.choices)}: add what it reads to its declaration")

    def __getattr__(self, layer: str) -> Choice:
        choices = self.__dict__.get("choices", {})
        if layer in choices:
            return choices[layer]
        if layer in registry.LAYERS:
            raise self._undeclared(f"layer '{layer}'")
        raise AttributeError(layer)

    @property
    def key(self) -> str:
        raise self._undeclared("the point's key (every layer)")

    @property
    def is_baseline(self) -> bool:
        if "tuning" not in self.choices:
            raise self._undeclared("whether the point is a baseline (layer 'tuning')")
        return BASELINE_TAG in self.choices["tuning"].tags

    def labels(self) -> dict[str, str]:
        raise self._undeclared("the point's labels (every layer)")


def _matches(rule: dict[str, str | list[str]], choices: dict[str, Choice]) -> bool:
    """A rule entry names an option (any of its parameter settings) or one setting by its
    label, as the results show it: `direct(layout=NCHWc)`."""
    for layer, names in rule.items():
        allowed = [names] if isinstance(names, str) else names
        choice = choices[layer]
        if choice.name not in allowed and choice.label not in allowed:
            return False
    return True


def _no_algorithm(params: BaseModel) -> None:
    raise RuntimeError("a baseline runtime uses its own kernels: there is no conv algorithm "
                       "to build")


@functools.cache
def _runtime_option(runtime: str) -> registry.Option:
    return registry.Option(
        layer="algorithms", name=runtime, fn=_no_algorithm, params=registry.NoParams,
        description=f"{runtime}'s own kernels (a baseline: the algorithm axis does not apply)",
        version="baseline", source="dlas.sweep.grid (baseline stand-in)",
        tags=frozenset({BASELINE_TAG}))


def runtime_choice(tuning: Choice) -> Choice:
    """The algorithms-axis stand-in of a baseline tuning choice: named after the runtime,
    with no parameters, so the point (and its cache keys) do not depend on which
    algorithms the sweep lists."""
    return _runtime_choice(tuning.name)


@functools.cache
def _runtime_choice(runtime: str) -> Choice:
    # one shared object per runtime: its identity_json is computed once per process
    return Choice(_runtime_option(runtime), registry.NoParams())


def expand(config: SweepConfig, excluded: list[Point] | None = None) -> list[Point]:
    """All points of the sweep, in layer order; blocked ones carry their reason.

    Points of a baseline tuning choice take `runtime_choice` on the algorithms axis and
    appear once, where their first algorithm would have been. Points the sweep's own
    `exclude` rules remove are left out (the user asked for that; listing them would
    bury the points that cannot run for a reason); pass `excluded` to collect them."""
    per_layer: list[list[Choice]] = []
    for layer in registry.LAYERS:
        choices = []
        for spec in config.options(layer):
            option = registry.get(layer, spec.name)
            choices.append(Choice(option, option.parse_params(spec.params)))
        per_layer.append(choices)

    points: list[Point] = []
    # the points' identities without their budgets, which all points share: equal exactly
    # when their keys are, without hashing every point's whole config
    seen: set[tuple[str, ...]] = set()
    for combo in itertools.product(*per_layer):
        choices = dict(zip(registry.LAYERS, combo, strict=True))
        if BASELINE_TAG in choices["tuning"].tags:
            choices["algorithms"] = runtime_choice(choices["tuning"])
            combo = tuple(choices.values())
        point = Point(choices=choices, budgets=config.budgets, index=len(points))
        identity = tuple(choice.identity_json for choice in combo)
        if identity in seen:
            if point.is_baseline:  # already listed under an earlier algorithm
                continue
            # parse_config rejects an axis listing one choice twice, so this is a bug
            raise ConfigError(f"sweep '{config.name}' lists the point {point.describe()} "
                              "twice; remove the repeated option from its axis")
        seen.add(identity)
        for i, rule in enumerate(config.exclude):
            if _matches(rule, choices):
                point.blocked = f"excluded by the sweep's exclude rule #{i + 1} ({rule})"
                break
        if point.blocked is not None:
            if excluded is not None:
                excluded.append(point)
            continue
        if point.blocked is None:
            for choice in combo:
                reason = choice.option.cannot_run(point)
                if reason:
                    point.blocked = f"{choice.layer} '{choice.name}': {reason}"
                    break
        points.append(point)
    return points
