"""Sweep configs: YAML naming options per layer, budgets and exclusion rules.

Errors point at the file and line of the offending key, because a sweep file is the user's
main interface and a bare pydantic traceback does not say where to look.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlas import registry

Loc = tuple[str | int, ...]


class ConfigError(ValueError):
    """A sweep config that cannot be used; the message says where and why."""


class OptionSpec(BaseModel):
    """One option on a layer as written in the config: a name and its parameters."""

    model_config = ConfigDict(extra="forbid")
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class Budgets(BaseModel):
    """How much work each stage may do; part of every cache key it affects."""

    model_config = ConfigDict(extra="forbid")
    epochs: int = Field(5, ge=0, description="training epochs")
    finetune_epochs: int = Field(2, ge=0, description="fine-tuning epochs after compression")
    data_fraction: float = Field(1.0, gt=0, le=1, description="fraction of the training set")
    batch_size: int = Field(128, ge=1, description="training batch size")
    max_lr: float = Field(0.05, gt=0, description="one-cycle peak learning rate")
    finetune_lr: float = Field(0.05, gt=0, description="fine-tuning one-cycle peak LR")
    tuning_trials: int = Field(0, ge=0, description="auto-scheduler trials (total)")
    measure_repeat: int = Field(150, ge=1, description="timed runs per point (paper: 150)")
    measure_number: int = Field(1, ge=1, description="calls averaged inside one timed run")
    warmup: int = Field(1, ge=0, description="discarded warm-up runs")
    verify_samples: int = Field(16, ge=1, description="inputs compared against PyTorch")
    seed: int = Field(0, description="seed for data splits, init and training")
    cv_threshold: float = Field(
        0.05, ge=0, description="flag a point noisy when its timing samples' coefficient of "
                                "variation (std/mean) exceeds this; read when the row is "
                                "written, so no stage is recomputed when it changes")


LAYER_DEFAULTS: dict[str, list[str]] = {
    "compression": ["none"],
    "algorithms": ["direct"],
    "tuning": ["none"],
    "targets": ["host"],
}


def _as_spec_list(value: Any) -> Any:
    if isinstance(value, (str, dict)):
        value = [value]
    if isinstance(value, list):
        return [{"name": v} if isinstance(v, str) else v for v in value]
    return value


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    datasets: list[OptionSpec] = Field(min_length=1)
    models: list[OptionSpec] = Field(min_length=1)
    compression: list[OptionSpec] = Field(
        default_factory=lambda: [OptionSpec(name=n) for n in LAYER_DEFAULTS["compression"]]
    )
    algorithms: list[OptionSpec] = Field(
        default_factory=lambda: [OptionSpec(name=n) for n in LAYER_DEFAULTS["algorithms"]]
    )
    tuning: list[OptionSpec] = Field(
        default_factory=lambda: [OptionSpec(name=n) for n in LAYER_DEFAULTS["tuning"]]
    )
    targets: list[OptionSpec] = Field(
        default_factory=lambda: [OptionSpec(name=n) for n in LAYER_DEFAULTS["targets"]]
    )
    budgets: Budgets = Field(default_factory=Budgets)
    #: Each rule maps layers to option names; a point matching every entry is excluded.
    exclude: list[dict[str, str | list[str]]] = Field(default_factory=list)

    _coerce = field_validator(*registry.LAYERS, mode="before")(_as_spec_list)

    def options(self, layer: str) -> list[OptionSpec]:
        return getattr(self, layer)


# --- line numbers ---------------------------------------------------------------------


def _line_map(node: yaml.Node, loc: Loc = (), out: dict[Loc, int] | None = None) -> dict[Loc, int]:
    """Map every key path in a composed YAML tree to its 1-based line."""
    out = {} if out is None else out
    out.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out[loc + (key,)] = key_node.start_mark.line + 1
            _line_map(value_node, loc + (key,), out)
            out[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, loc + (i,), out)
    return out


def _line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _where(source: str, lines: dict[Loc, int], loc: Loc) -> str:
    line = _line_of(lines, loc)
    return f"{source}:{line}" if line else source


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(
    exc: ValidationError, source: str, lines: dict[Loc, int], prefix: Loc = ()
) -> list[str]:
    msgs = []
    for err in exc.errors():
        loc = prefix + tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        got = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
        if err["type"] == "extra_forbidden":
            msgs.append(f"{_where(source, lines, loc)}: unknown key '{_dotted(loc)}'")
        else:
            msgs.append(f"{_where(source, lines, loc)}: '{_dotted(loc)}': {err['msg']}{got}")
    return msgs


# --- loading --------------------------------------------------------------------------


def load_config(path: str | Path) -> SweepConfig:
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"sweep config not found: {path.resolve()}")
    return parse_config(path.read_text(), source=str(path))


def parse_config(text: str, source: str = "<config>") -> SweepConfig:
    """Parse and fully validate a sweep: structure, option names, option parameters."""
    try:
        node = yaml.compose(text)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: a sweep config is a YAML mapping with keys "
                          f"name, {', '.join(registry.LAYERS)}, budgets, exclude")
    lines = _line_map(node)
    try:
        config = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError("invalid sweep config:\n  " + "\n  ".join(
            _describe(exc, source, lines))) from None

    problems: list[str] = []
    for layer in registry.LAYERS:
        for i, spec in enumerate(config.options(layer)):
            try:
                option = registry.get(layer, spec.name)
            except registry.UnknownOptionError as exc:
                problems.append(f"{_where(source, lines, (layer, i, 'name'))}: {exc}")
                continue
            try:
                option.parse_params(spec.params)
            except ValidationError as exc:
                problems += _describe(exc, source, lines, (layer, i, "params"))
    for i, rule in enumerate(config.exclude):
        for layer, names in rule.items():
            loc: Loc = ("exclude", i, layer)
            if layer not in registry.LAYERS:
                problems.append(f"{_where(source, lines, loc)}: exclude rule names unknown "
                                f"layer '{layer}'; layers are: {', '.join(registry.LAYERS)}")
                continue
            valid = {s.name for s in config.options(layer)}
            for name in [names] if isinstance(names, str) else names:
                if name not in valid:
                    problems.append(f"{_where(source, lines, loc)}: exclude rule names {layer} "
                                    f"'{name}', which this sweep does not use "
                                    f"(it uses: {', '.join(sorted(valid))})")
    if problems:
        raise ConfigError("invalid sweep config:\n  " + "\n  ".join(problems))
    return config
