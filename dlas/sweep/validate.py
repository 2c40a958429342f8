"""The checks a sweep config passes beyond its types, each reported with file:line.

Pydantic checks the structure; these catch configs that are well typed but cannot mean
what the user wanted: an axis with no options (a sweep of 0 points), the same choice
twice on an axis (a duplicate point, counted twice by the run's summary but stored once),
and exclude rules that match nothing or everything. A config that passes them expands
to a grid with at least one point and no two points alike.
"""

from __future__ import annotations

import difflib
import itertools
import json
import reprlib
import types
import typing
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from dlas import registry
from dlas.registry import BASELINE_TAG
from dlas.sweep.yaml_source import Loc


class FileChoice(Protocol):
    """One choice of a layer as the sweep file gives it (`dlas.sweep.config.OptionSpec`)."""

    name: str
    params: dict[str, Any]


class Sweep(Protocol):
    """What the checks read of a parsed sweep (`dlas.sweep.config.SweepConfig`), as a
    Protocol: the config module runs these checks, so this one does not import it."""

    exclude: list[dict[str, str | list[str]]]

    def options(self, layer: str) -> Sequence[FileChoice]:
        """The layer's choices, in file order."""


class Where:
    """Turns key paths of one file into `file:line` prefixes."""

    def __init__(self, source: str, lines: dict[Loc, int]) -> None:
        self.source, self.lines = source, lines

    def line(self, loc: Loc) -> int | None:
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None

    def __call__(self, loc: Loc) -> str:
        line = self.line(loc)
        return f"{self.source}:{line}" if line else self.source


def dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --- pydantic errors ------------------------------------------------------------------


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `X | None`, `list[X]`), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _submodel(arg)
            if found is not None:
                return found
    return None


def _model_at(model: type[BaseModel], parts: Loc) -> type[BaseModel] | None:
    """The model whose key sits at `parts` (a path of field names and list indices)."""
    for part in parts:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        sub = _submodel(field.annotation) if field is not None else None
        if sub is None:
            return None
        model = sub
    return model


def _unknown_key_hint(model: type[BaseModel] | None, key: str) -> str:
    if model is None:
        return ""
    valid = list(model.model_fields)
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    return f".{hint} Valid keys here: {', '.join(valid) or '(none)'}"


#: The most characters of a wrong value an error message quotes (a long list or text
#: would bury the message, and a huge value would take long to print).
QUOTE_CHARS = 200


def _quoter() -> reprlib.Repr:
    short = reprlib.Repr()  # keyword arguments only from Python 3.12
    short.maxlevel, short.maxlist, short.maxdict = 3, 8, 8
    short.maxstring = short.maxother = QUOTE_CHARS
    return short


_QUOTER = _quoter()


def quote(value: Any) -> str:
    """`repr(value)`, with long collections and text elided (`reprlib`)."""
    text = _QUOTER.repr(value)
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 3] + "..."


def describe(exc: ValidationError, where: Where, prefix: Loc = (),
             model: type[BaseModel] | None = None) -> list[str]:
    """One `file:line: what` message per pydantic error; `model` is the schema validated
    at `prefix` (used to suggest the nearest key for an unknown one)."""
    msgs = []
    for err in exc.errors():
        rel = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        loc = prefix + rel
        got = "" if err["type"] == "missing" else f" (got {quote(err.get('input'))})"
        if err["type"] == "extra_forbidden":
            owner = _model_at(model, rel[:-1]) if model is not None else None
            msgs.append(f"{where(loc)}: unknown key '{dotted(loc)}'"
                        f"{_unknown_key_hint(owner, str(rel[-1]))}")
        else:
            msg = err["msg"].removeprefix("Value error, ")  # our validators' own words
            msgs.append(f"{where(loc)}: '{dotted(loc)}': {msg}{got}")
    return msgs


# --- axes -----------------------------------------------------------------------------


def empty_axes(raw: dict[str, Any], where: Where, defaults: dict[str, list[str]]) -> list[str]:
    """Axes written with no options: a sweep over them would have no points at all."""
    problems = []
    for layer in registry.LAYERS:
        if layer in raw and raw[layer] in (None, [], {}, ""):
            default = (f", or delete the key to use the default [{', '.join(defaults[layer])}]"
                       if layer in defaults else "")
            names = ", ".join(o.name for o in registry.list_options(layer))
            problems.append(f"{where((layer,))}: '{layer}' lists no options, so the sweep "
                            f"would have no points: name at least one ({names}){default}")
    return problems


def ignored_params(layer: str, index: int, params_model: type[BaseModel],
                   raw: dict[str, Any], where: Where) -> list[str]:
    """Parameter keys an option's schema would silently drop.

    A third-party schema without `extra="forbid"` ignores unknown keys, so a misspelled
    parameter would run with its default; unless the schema asks for extra keys
    (`extra="allow"`), an unknown key is an error here whatever the schema says.
    """
    if params_model.model_config.get("extra") in ("forbid", "allow"):
        return []
    known = set()
    for name, field in params_model.model_fields.items():
        known |= {name, field.alias} | ({field.validation_alias}
                                        if isinstance(field.validation_alias, str) else set())
    return [f"{where((layer, index, 'params', key))}: unknown key "
            f"'{dotted((layer, index, 'params', key))}'{_unknown_key_hint(params_model, key)}"
            for key in raw if key not in known]


def _identity(spec: Any, params: BaseModel) -> str:
    return json.dumps([spec.name, params.model_dump(mode="json")], sort_keys=True,
                      default=str)


def duplicate_choices(layer: str, parsed: list[tuple[int, Any, BaseModel]],
                      where: Where) -> list[str]:
    """Options of one axis that resolve to the same choice (same name, equal parameters
    after validation, however they were written): each would be the same point twice."""
    problems = []
    first: dict[str, int] = {}
    for i, spec, params in parsed:
        ident = _identity(spec, params)
        if ident not in first:
            first[ident] = i
            continue
        j = first[ident]
        line_j, line_i = where.line((layer, j)), where.line((layer, i))
        if line_j and line_i and line_j != line_i:
            lines = f"lines {line_j} and {line_i}: {layer}[{j}] and {layer}[{i}]"
        else:
            lines = f"{layer}[{j}] and {layer}[{i}]"
        problems.append(
            f"{where((layer, i))}: {layer} option '{spec.name}' is listed twice ({lines}) "
            "with the same parameters once validated, which would run the same points "
            "twice: delete one, or give them different params")
    return problems


# --- exclude rules --------------------------------------------------------------------


def exclude_rules(config: Sweep, where: Where) -> list[str]:
    """Rules that name unknown layers or options, or have nothing to match on."""
    problems: list[str] = []
    for i, rule in enumerate(config.exclude):
        if not rule:
            problems.append(f"{where(('exclude', i))}: exclude rule #{i + 1} is empty, so it "
                            "would match (and leave out) every point: name at least one "
                            "layer and option, e.g. {compression: none, algorithms: gemm}")
        for layer, names in rule.items():
            loc: Loc = ("exclude", i, layer)
            if layer not in registry.LAYERS:
                near = difflib.get_close_matches(layer, list(registry.LAYERS), n=1)
                hint = f" Did you mean '{near[0]}'?" if near else ""
                problems.append(f"{where(loc)}: exclude rule names unknown layer '{layer}'."
                                f"{hint} Layers are: {', '.join(registry.LAYERS)}")
                continue
            names = [names] if isinstance(names, str) else names
            if not names:
                problems.append(f"{where(loc)}: exclude rule #{i + 1} lists no {layer} "
                                "options, so it can match no point: name at least one or "
                                "delete the rule")
            valid = {s.name for s in config.options(layer)}
            labels = _labels(config, layer)
            for name in names:
                if name not in valid and name not in labels:
                    problems.append(f"{where(loc)}: exclude rule names {layer} '{name}', "
                                    "which this sweep does not use (it uses: "
                                    f"{', '.join(sorted(valid | labels))})")
    return problems


def _labels(config: Sweep, layer: str) -> set[str]:
    """The labels of a layer's choices (`direct(layout=NCHWc)`), which an exclude rule may
    name instead of an option; choices whose parameters do not parse have none."""
    out = set()
    for spec in config.options(layer):
        try:
            option = registry.get(layer, spec.name)
            out.add(registry.choice_label(spec.name, option.parse_params(spec.params)))
        except Exception:  # noqa: BLE001 - reported by the option checks
            continue
    return out


def _rule_matches(rule: dict[str, str | list[str]], combo: dict[str, str]) -> bool:
    """On option names only: an entry naming a label (one parameter setting) matches
    less than its option, so it is counted as matching nothing here."""
    return all(combo[layer] in ([n] if isinstance(n, str) else n) for layer, n in rule.items())


def everything_excluded(config: Sweep, where: Where) -> list[str]:
    """The exclude rules together leave out every point: report it instead of a 0-point
    sweep that 'succeeds'. Checked on option names, which is what rules match."""
    if not config.exclude:
        return []
    baselines = {s.name for s in config.options("tuning")
                 if BASELINE_TAG in registry.get("tuning", s.name).tags}
    axes = [list(dict.fromkeys(s.name for s in config.options(layer)))
            for layer in registry.LAYERS]
    for combo in itertools.product(*axes):
        names = dict(zip(registry.LAYERS, combo, strict=True))
        if names["tuning"] in baselines:  # as in grid.expand: the runtime's own stand-in
            names["algorithms"] = names["tuning"]
        if not any(_rule_matches(rule, names) for rule in config.exclude):
            return []
    return [f"{where(('exclude',))}: the exclude rules leave out every point of the grid, "
            "so the sweep would run nothing: narrow or delete a rule (`dlas plan` lists the "
            "points)"]
