"""Paper-reproduction experiments: `experiments/<name>.yaml`, one per study of the paper.

An experiment names the paper's dataset and device, which paper platform our targets
stand for, and its sweep at each profile (`full`: the paper's scale; `quick`: a laptop).
Loading checks the file's structure only; option names are checked against the registry
when a profile is resolved for running, so an option that is not registered yet breaks
`dlas reproduce` of that profile with a clear message, not the import of every experiment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dlas import registry
from dlas.report.paper import PAPER_FILE, experiments_dir
from dlas.sweep.config import ConfigError, SweepConfig, parse_config

DEVICES = ("cpu", "gpu")


class ExperimentError(ConfigError):
    """An experiment that does not exist or cannot be used; the message says why."""


@dataclass
class Profile:
    name: str
    description: str
    sweep: dict[str, Any]

    @property
    def sweep_name(self) -> str:
        return str(self.sweep["name"])


@dataclass
class Experiment:
    name: str
    title: str
    dataset: str
    device: str
    paper_platforms: dict[str, str]
    profiles: dict[str, Profile]
    source: Path
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            raise ExperimentError(f"experiment '{self.name}' has no profile '{name}'; its "
                                  f"profiles are: {', '.join(self.profiles)}")
        return self.profiles[name]

    @property
    def sweep_names(self) -> list[str]:
        return [p.sweep_name for p in self.profiles.values()]


def list_experiments(directory: Path | None = None) -> list[str]:
    directory = directory or experiments_dir()
    return sorted(p.stem for p in directory.glob("*.yaml") if p.name != PAPER_FILE)


def _require(raw: dict[str, Any], key: str, kind: type, source: Path) -> Any:
    if key not in raw:
        raise ExperimentError(f"{source}: missing key '{key}'")
    if not isinstance(raw[key], kind):
        raise ExperimentError(f"{source}: '{key}' must be a {kind.__name__}, got "
                              f"{type(raw[key]).__name__}")
    return raw[key]


def parse_experiment(raw: Any, source: Path) -> Experiment:
    if not isinstance(raw, dict):
        raise ExperimentError(f"{source}: an experiment is a YAML mapping")
    known = {"name", "title", "dataset", "device", "paper_platforms", "profiles", "tables",
             "figures"}
    unknown = set(raw) - known
    if unknown:
        raise ExperimentError(f"{source}: unknown keys {sorted(unknown)}; valid keys: "
                              f"{', '.join(sorted(known))}")
    name = _require(raw, "name", str, source)
    if name != source.stem:
        raise ExperimentError(f"{source}: name '{name}' must match the file name "
                              f"'{source.stem}'")
    device = _require(raw, "device", str, source)
    if device not in DEVICES:
        raise ExperimentError(f"{source}: device must be one of {DEVICES}, got '{device}'")
    profiles = {}
    for pname, spec in _require(raw, "profiles", dict, source).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("sweep"), dict):
            raise ExperimentError(f"{source}: profile '{pname}' needs a 'sweep' mapping")
        sweep = dict(spec["sweep"])
        expected = f"{name}-{pname}"
        if sweep.setdefault("name", expected) != expected:
            raise ExperimentError(f"{source}: profile '{pname}' sweep name must be "
                                  f"'{expected}' (or left out), got '{sweep['name']}'")
        profiles[pname] = Profile(pname, str(spec.get("description", "")), sweep)
    if not profiles:
        raise ExperimentError(f"{source}: no profiles")
    return Experiment(
        name=name, title=str(raw.get("title", name)),
        dataset=_require(raw, "dataset", str, source), device=device,
        paper_platforms=dict(raw.get("paper_platforms") or {}), profiles=profiles,
        source=source, tables=list(raw.get("tables") or []),
        figures=list(raw.get("figures") or []),
    )


def load_experiment(name: str, directory: Path | None = None) -> Experiment:
    directory = directory or experiments_dir()
    path = directory / f"{name}.yaml"
    valid = list_experiments(directory)
    if name == Path(PAPER_FILE).stem or not path.exists():
        raise ExperimentError(f"unknown experiment '{name}'; experiments in {directory}: "
                              f"{', '.join(valid) or '(none)'}")
    from dlas.sweep.yaml_source import load_yaml, read_config_text

    # the sweep config's reader: duplicate keys, non-UTF-8 text, etc. are errors with file:line
    try:
        raw, _ = load_yaml(read_config_text(path, "experiment"), str(path), "experiment")
    except ConfigError as exc:
        raise ExperimentError(str(exc)) from None
    return parse_experiment(raw, path)


def _names(entries: Any) -> list[str]:
    if isinstance(entries, (str, dict)):
        entries = [entries]
    return [e if isinstance(e, str) else str(e.get("name")) for e in entries or []]


def unregistered(sweep: dict[str, Any]) -> dict[str, list[str]]:
    """Option names per layer that no plugin registers (yet)."""
    registry.load_plugins()
    missing: dict[str, list[str]] = {}
    for layer in registry.LAYERS:
        valid = {o.name for o in registry.list_options(layer)}
        gone = [n for n in _names(sweep.get(layer)) if n not in valid]
        if gone:
            missing[layer] = gone
    return missing


def drop_options(sweep: dict[str, Any], missing: dict[str, list[str]]) -> dict[str, Any]:
    """The sweep without `missing` options (and without exclude rules about only them)."""
    out = dict(sweep)
    for layer, names in missing.items():
        entries = out.get(layer)
        if isinstance(entries, (str, dict)):
            entries = [entries]
        kept = [e for e in entries or [] if _names([e])[0] not in names]
        if not kept:
            raise ExperimentError(f"nothing left on layer '{layer}' once the unregistered "
                                  f"options {names} are dropped")
        out[layer] = kept
    rules = []
    for rule in out.get("exclude") or []:
        new_rule, empty = {}, False
        for layer, names in rule.items():
            names = [names] if isinstance(names, str) else list(names)
            names = [n for n in names if n not in missing.get(layer, [])]
            empty = empty or not names
            new_rule[layer] = names
        if not empty:  # a rule about dropped options only can match nothing now
            rules.append(new_rule)
    out["exclude"] = rules
    return out


def resolve_sweep(experiment: Experiment, profile: str, *,
                  skip_unregistered: bool = False,
                  write_to: Path | None = None) -> tuple[SweepConfig, dict[str, list[str]]]:
    """The profile's sweep, validated against the registry; returns it and the options
    dropped because they are not registered (only with `skip_unregistered`). With
    `write_to`, the resolved sweep is written there first (errors then cite its lines)."""
    prof = experiment.profile(profile)
    sweep = dict(prof.sweep)
    missing = unregistered(sweep)
    if missing and not skip_unregistered:
        listing = "; ".join(f"{layer}: {', '.join(names)}" for layer, names in missing.items())
        raise ExperimentError(
            f"experiment '{experiment.name}' profile '{profile}' names options that are not "
            f"registered: {listing}. `dlas plugins` lists what exists; pass "
            "--skip-unregistered to run the rest now (the report says what was left out)")
    if missing:
        sweep = drop_options(sweep, missing)
    text = yaml.safe_dump(sweep, sort_keys=False)
    source = f"{experiment.source} (profile {profile})"
    if write_to is not None:
        write_to.parent.mkdir(parents=True, exist_ok=True)
        header = (f"# resolved from {experiment.source}, profile '{profile}'"
                  + (f"; left out (unregistered): {missing}" if missing else "") + "\n")
        text = header + text  # parsed as written, so error line numbers match the file
        write_to.write_text(text)
        source = str(write_to)
    try:
        config = parse_config(text, source=source)
    except ConfigError as exc:
        raise ExperimentError(f"experiment '{experiment.name}' profile '{profile}': "
                              f"{exc}") from None
    return config, missing


def current_point_keys(experiment: Experiment) -> set[str] | None:
    """Keys of every point the experiment's profiles define now (options not registered
    are left out); None when no profile can be resolved here."""
    from dlas.sweep.grid import expand

    keys: set[str] | None = None
    for profile in experiment.profiles:
        try:
            config, _ = resolve_sweep(experiment, profile, skip_unregistered=True)
        except ExperimentError:
            continue
        keys = (keys or set()) | {p.key for p in expand(config)}
    return keys
