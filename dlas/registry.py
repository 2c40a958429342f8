"""The option registry: one per stack layer, filled through the `dlas.plugins` entry points.

Built-in options register exactly as third-party ones do: a module listed under the
`dlas.plugins` entry-point group is imported, and its `@register(...)` decorators add
options. So adding an option never means editing the core (the timm pattern: a decorator
registers, `create` builds, `list_options` shows what exists).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.metadata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

ENTRY_POINT_GROUP = "dlas.plugins"

#: Tuning-option tag: the option is a baseline runtime (PyTorch, ONNX Runtime) measured
#: beside the TVM variants; the algorithms axis does not apply to it.
BASELINE_TAG = "baseline"
#: Compression-option tag: the option prunes (removes or zeroes weights), so the report
#: counts it with the paper's pruning (observations II, IV, IX, X, XII), a third-party
#: pruning option included.
PRUNING_TAG = "pruning"

#: The six DLAS layers, in stack order; the key is also the sweep-config section name.
LAYERS: dict[str, str] = {
    "datasets": "1 datasets",
    "models": "2 models",
    "compression": "3 model optimizations",
    "algorithms": "4 algorithms & data formats",
    "tuning": "5 systems software",
    "targets": "6 hardware",
}


class NoParams(BaseModel):
    """Schema for options that take no parameters (unknown keys are rejected)."""

    model_config = ConfigDict(extra="forbid")


class UnknownOptionError(KeyError):
    """An option name that no plugin registered; lists the valid names."""

    def __init__(self, layer: str, name: str, valid: list[str]) -> None:
        near = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        self.layer, self.name, self.valid, self.nearest = layer, name, valid, near
        msg = (
            f"unknown {layer} option '{name}'.{hint} "
            f"Valid {layer} options: {', '.join(sorted(valid)) or '(none registered)'}"
        )
        super().__init__(msg)

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def choice_label(name: str, params: BaseModel) -> str:
    """How results and exclude rules name an option with its parameters: the name, then
    the parameters set away from their defaults, e.g. `direct(layout=NCHWc)`."""
    set_params = params.model_dump(mode="json", exclude_defaults=True)
    if not set_params:
        return name
    inner = ",".join(f"{k}={v}" for k, v in sorted(set_params.items()))
    return f"{name}({inner})"


@dataclass
class Option:
    """A registered option on one layer."""

    layer: str
    name: str
    fn: Callable[..., Any]
    params: type[BaseModel]
    description: str
    version: str
    source: str
    constraints: list[Callable[[Any], str | None]] = field(default_factory=list)
    tags: frozenset[str] = frozenset()
    #: `(params) -> facts`: what the option's output depends on besides its parameters,
    #: read off this machine (e.g. int8's `reduce_range: auto` follows the CPU's VNNI);
    #: hashed into the stage key the option's output is stored under.
    key_facts: Callable[[Any], dict[str, Any]] | None = None

    def parse_params(self, raw: dict[str, Any] | None) -> BaseModel:
        return self.params.model_validate(raw or {})

    def cannot_run(self, point: Any) -> str | None:
        """The first reason this option cannot run in `point`, if any."""
        for check in self.constraints:
            reason = check(point)
            if reason:
                return reason
        return None


_REGISTRY: dict[str, dict[str, Option]] = {layer: {} for layer in LAYERS}
_current_source: str | None = None  # set while an entry point loads
_loaded = False


def _check_layer(layer: str) -> None:
    if layer not in LAYERS:
        raise ValueError(f"unknown layer '{layer}'; layers are: {', '.join(LAYERS)}")


def register(
    layer: str,
    name: str,
    *,
    params: type[BaseModel] = NoParams,
    description: str,
    version: str = "1",
    constraints: list[Callable[[Any], str | None]] | None = None,
    tags: set[str] | frozenset[str] = frozenset(),
    key_facts: Callable[[Any], dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as option `name` on `layer`.

    `version` is part of every cache key the option's output feeds: bump it when the
    option's behaviour changes so cached artifacts are recomputed. `constraints` are
    checks `(point) -> reason | None` that rule out combinations the option cannot run in;
    `tags` are facts other options' constraints can test (e.g. a compression that
    produces `sparse` weights). `key_facts(params)` returns what the option's output
    depends on besides its parameters (facts of this machine); it joins the stage key.
    """
    _check_layer(layer)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        source = _current_source or f"module {fn.__module__} (not an entry point)"
        from dlas.contracts import check_option

        check_option(layer, name, fn, params, list(constraints or []), key_facts, source)
        existing = _REGISTRY[layer].get(name)
        if existing is not None and existing.fn.__module__ != fn.__module__:
            raise ValueError(
                f"{layer} option '{name}' is registered twice: by {existing.source} "
                f"and by {source}"
            )
        _REGISTRY[layer][name] = Option(
            layer=layer,
            name=name,
            fn=fn,
            params=params,
            description=description,
            version=str(version),
            source=source,
            constraints=list(constraints or []),
            tags=frozenset(tags),
            key_facts=key_facts,
        )
        return fn

    return decorator


def unregister(layer: str, name: str) -> None:
    """Remove an option (tests register throwaway options and clean up after)."""
    _REGISTRY[layer].pop(name, None)


@contextlib.contextmanager
def _source(label: str | None) -> Iterator[None]:
    global _current_source
    previous, _current_source = _current_source, label
    try:
        yield
    finally:
        _current_source = previous


class PluginLoadError(RuntimeError):
    pass


def load_plugins(force: bool = False) -> None:
    """Import every module in the `dlas.plugins` entry-point group (once per process)."""
    global _loaded
    if _loaded and not force:
        return
    _loaded = True
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    for ep in sorted(eps, key=lambda e: (e.dist.name != "dlas" if e.dist else True, e.name)):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "unknown distribution"
        label = f"{dist} (entry point '{ep.name}' = {ep.value})"
        with _source(label):
            try:
                ep.load()
            except Exception as exc:  # a broken plugin must name itself
                _loaded = False
                raise PluginLoadError(
                    f"plugin entry point '{ep.name}' ({ep.value}) from {dist} failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        # a module imported before this call registered without knowing its entry point
        for options in _REGISTRY.values():
            for opt in options.values():
                if opt.fn.__module__ == ep.module and opt.source != label:
                    opt.source = label


def get(layer: str, name: str) -> Option:
    _check_layer(layer)
    load_plugins()
    try:
        return _REGISTRY[layer][name]
    except KeyError:
        raise UnknownOptionError(layer, name, list(_REGISTRY[layer])) from None


def list_options(layer: str | None = None) -> list[Option]:
    load_plugins()
    layers = [layer] if layer else list(LAYERS)
    for lyr in layers:
        _check_layer(lyr)
    return [opt for lyr in layers for opt in sorted(_REGISTRY[lyr].values(), key=lambda o: o.name)]


def create(layer: str, name: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Validate `params` against the option's schema and call it (timm's `create_model`)."""
    option = get(layer, name)
    return option.fn(option.parse_params(params), **kwargs)
