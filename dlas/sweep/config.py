"""Sweep configs: YAML naming options per layer, budgets and exclusion rules.

Errors point at the file and line of the offending key, because a sweep file is the user's
main interface and a bare pydantic traceback does not say where to look.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dlas import registry
from dlas.sweep import validate
from dlas.sweep.yaml_source import ConfigError, load_yaml, read_config_text

__all__ = ["Budgets", "ConfigError", "OptionSpec", "SweepConfig", "load_config",
           "parse_config"]


class OptionSpec(BaseModel):
    """One option on a layer as written in the config: a name and its parameters."""

    model_config = ConfigDict(extra="forbid")
    name: str
    params: dict[str, Any] = Field(default_factory=dict)


class Budgets(BaseModel):
    """How much work each stage may do; part of every cache key it affects.

    Strict types: YAML reads `yes` as a boolean and pydantic would take it as 1 epoch, and
    `2.5` epochs would be cut; a budget is only what the user wrote as a number.
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    epochs: int = Field(5, ge=0, description="training epochs")
    finetune_epochs: int = Field(2, ge=0, description="fine-tuning epochs after compression")
    data_fraction: float = Field(1.0, gt=0, le=1, description="fraction of the training set")
    batch_size: int = Field(128, ge=1, description="training batch size")
    max_lr: float = Field(0.05, gt=0, description="one-cycle peak learning rate")
    finetune_lr: float = Field(0.05, gt=0, description="fine-tuning one-cycle peak LR")
    train_precision: Literal["float32", "bfloat16", "auto"] = Field(
        "float32", description="arithmetic of training and fine-tuning: float32 (the "
                               "paper's), bfloat16 (autocast, float32 weights), or auto "
                               "(bfloat16 where the CPU has it natively: AVX512_BF16 or "
                               "AMX; dlas.models.train_precision)")
    tuning_trials: int = Field(0, ge=0, description="auto-scheduler trials (total)")
    measure_repeat: int = Field(150, ge=1, description="timed runs per point (paper: 150), "
                                                       "spread over its timing passes")
    measure_number: int = Field(1, ge=1, description="calls averaged inside one timed run")
    warmup: int = Field(1, ge=0, description="discarded warm-up runs")
    verify_samples: int = Field(16, ge=1, description="inputs compared against PyTorch")
    seed: int = Field(0, ge=0, lt=2**32, description="seed for data splits, init and "
                                                     "training (numpy takes 0 .. 2**32-1)")
    ci_threshold: float = Field(
        0.10, ge=0, description="flag a point noisy when its median's 95% confidence "
                                "interval is wider than this fraction of the median; read "
                                "when the row is written, so no stage is recomputed when it "
                                "changes")
    timing_rounds: int = Field(
        10, ge=2, description="rounds each variant is timed in, interleaved with the other "
                              "variants of its model, spread over its timing passes (each "
                              "pass takes its share, at least 4); measure_repeat samples are "
                              "spread over them, and the confidence interval resamples them")
    timing_passes: int = Field(
        3, ge=1, le=20, description="timing runs each measured point gets, each pass after "
                                    "the last one finished every model, sharing the point's "
                                    "rounds, samples and placement wait; a row pools them. "
                                    "Runs minutes apart differ by several percent on shared "
                                    "VMs; three short passes agree better across invocations "
                                    "than one long run (docs/timing.md)")
    placement_wait_s: float = Field(
        30.0, ge=0, description="seconds a point's timing may keep taking rounds for the "
                                "vCPUs to move to near placement (docs/timing.md), spread "
                                "over its timing passes; after that the placement with most "
                                "rounds is used and recorded")
    noise_retries: int = Field(
        5, ge=0, description="re-takes per timing group of rounds taken while other "
                             "processes kept the CPUs busy; 0: never re-take")
    noise_budget_s: float = Field(
        20.0, ge=0, description="seconds per timing group for waiting for a busy machine to "
                                "become quiet and re-taking rounds; what is still taken under "
                                "load is kept and flagged noisy")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cv_threshold" in data:
            raise ValueError(
                "budgets.cv_threshold is gone: the noise flag now reads the median's "
                "confidence interval; use ci_threshold (the widest interval allowed, as a "
                "fraction of the median, default 0.10)")
        return data


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
    name: str = Field(min_length=1)
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
    #: Each rule maps layers to option names or labels (`direct(layout=NCHWc)`: one
    #: parameter setting); a point matching every entry is excluded.
    exclude: list[dict[str, str | list[str]]] = Field(default_factory=list)

    _coerce = field_validator(*registry.LAYERS, mode="before")(_as_spec_list)

    def options(self, layer: str) -> list[OptionSpec]:
        return getattr(self, layer)


# --- loading --------------------------------------------------------------------------


def load_config(path: str | Path) -> SweepConfig:
    """Read and validate a sweep file; every way it can be unusable is a ConfigError."""
    return parse_config(read_config_text(path), source=str(path))


def parse_config(text: str, source: str = "<config>") -> SweepConfig:
    """Parse and fully validate a sweep: structure, option names, option parameters, and
    the checks of `dlas.sweep.validate` (no empty axis, no duplicate choice, exclude rules
    that match something but not everything). What passes expands to >= 1 distinct point.
    """
    raw, lines = load_yaml(text, source)
    where = validate.Where(source, lines)
    if not isinstance(raw, dict):
        got = "empty" if raw is None else f"a YAML {type(raw).__name__}, not a mapping"
        raise ConfigError(f"{source}: the sweep config is {got}; a sweep config is a YAML "
                          f"mapping with keys name, {', '.join(registry.LAYERS)}, budgets, "
                          "exclude (configs/quickstart.yaml is a complete example)")
    empty = validate.empty_axes(raw, where, LAYER_DEFAULTS)
    if empty:
        raise ConfigError("invalid sweep config:\n  " + "\n  ".join(empty))
    try:
        config = SweepConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError("invalid sweep config:\n  " + "\n  ".join(
            validate.describe(exc, where, model=SweepConfig))) from None

    problems: list[str] = []
    for layer in registry.LAYERS:
        parsed: list[tuple[int, OptionSpec, BaseModel]] = []
        for i, spec in enumerate(config.options(layer)):
            try:
                option = registry.get(layer, spec.name)
            except registry.UnknownOptionError as exc:
                problems.append(f"{where((layer, i, 'name'))}: {exc}")
                continue
            try:
                parsed.append((i, spec, option.parse_params(spec.params)))
            except ValidationError as exc:
                problems += validate.describe(exc, where, (layer, i, "params"), option.params)
            problems += validate.ignored_params(layer, i, option.params, spec.params, where)
        problems += validate.duplicate_choices(layer, parsed, where)
    problems += validate.exclude_rules(config, where)
    if not problems:  # the rules only mean something once every name is known
        problems += validate.everything_excluded(config, where)
    if problems:
        raise ConfigError("invalid sweep config:\n  " + "\n  ".join(problems))
    return config
