"""Sweep config validation and grid expansion."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from dlas import registry
from dlas.sweep.config import ConfigError, load_config, parse_config
from dlas.sweep.grid import expand
from tests.conftest import tiny_sweep


def test_unknown_option_lists_valid_names_and_nearest_match() -> None:
    text = "name: x\ndatasets: [digits]\nmodels:\n  - name: resnet81\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="sweep.yaml")
    msg = str(err.value)
    assert "sweep.yaml:4" in msg
    assert "unknown models option 'resnet81'" in msg
    assert "Did you mean 'resnet18'?" in msg
    assert "mobilenetv2" in msg and "resnet18" in msg


def test_wrong_parameter_type_names_key_and_line() -> None:
    text = """name: x
datasets: [digits]
models: [resnet18]
compression:
  - name: weight_pruning
    params:
      sparsity: lots
budgets:
  epochs: five
"""
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="s.yaml")
    msg = str(err.value)
    assert "s.yaml:9: 'budgets.epochs'" in msg and "'five'" in msg
    # option params are checked against the option's own schema, after the structure
    text = text.replace("  epochs: five\n", "  epochs: 1\n")
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="s.yaml")
    assert "s.yaml:7: 'compression[0].params.sparsity'" in str(err.value)


def test_unknown_keys_and_bad_yaml() -> None:
    with pytest.raises(ConfigError, match=r"c.yaml:4: unknown key 'budgets.epoch'"):
        parse_config("name: x\ndatasets: [digits]\nbudgets:\n  epoch: 3\nmodels: [resnet18]\n",
                     source="c.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_config("name: [x\n")
    with pytest.raises(ConfigError, match="'models'.*Field required"):
        parse_config("name: x\ndatasets: [digits]\n")
    with pytest.raises(ConfigError, match="sweep config not found"):
        load_config("/nonexistent/sweep.yaml")


def test_parameter_constraint_inside_option_schema() -> None:
    text = tiny_sweep(compression=["none"]).replace(
        "  - none", "  - name: weight_pruning\n    params: {sparsity: 0.9, steps: [0.95, 0.9]}")
    with pytest.raises(ConfigError, match="steps must increase"):
        parse_config(text)


def test_grid_is_the_cartesian_product() -> None:
    text = tiny_sweep(compression=["none", "weight_pruning"])
    config = parse_config(text.replace("  - name: tiny_cnn", "  - tiny_cnn\n  - resnet18"))
    points = expand(config)
    assert len(points) == 4
    assert {(p.models.name, p.compression.name) for p in points} == {
        ("tiny_cnn", "none"), ("tiny_cnn", "weight_pruning"),
        ("resnet18", "none"), ("resnet18", "weight_pruning")}
    assert len({p.key for p in points}) == 4
    assert all(p.blocked is None for p in points)


class _Params(BaseModel):
    pass


@pytest.fixture
def sparse_only_algorithm():
    """An algorithm that, like CSR, runs only on models whose compression is sparse."""

    def needs_sparse(point) -> str | None:
        if "sparse" not in point.compression.tags:
            return f"needs a pruned model; compression '{point.compression.name}' is dense"
        return None

    @registry.register("algorithms", "test_sparse_only", description="test",
                       constraints=[needs_sparse])
    def _alg(params):  # pragma: no cover - never compiled here
        raise AssertionError

    yield "test_sparse_only"
    registry.unregister("algorithms", "test_sparse_only")


def test_impossible_combination_is_listed_with_reason(sparse_only_algorithm: str) -> None:
    config = parse_config(tiny_sweep(compression=["none", "weight_pruning"],
                                     algorithms=["direct", sparse_only_algorithm]))
    points = expand(config)
    assert len(points) == 4  # kept in the grid, not dropped
    blocked = [p for p in points if p.blocked]
    assert len(blocked) == 1
    (point,) = blocked
    assert point.compression.name == "none" and point.algorithms.name == sparse_only_algorithm
    assert "needs a pruned model" in point.blocked


def test_exclude_rules() -> None:
    text = tiny_sweep(compression=["none", "weight_pruning"]) + (
        "exclude:\n  - {compression: weight_pruning, algorithms: direct}\n")
    excluded: list = []
    points = expand(parse_config(text), excluded)
    assert [(p.compression.name, p.blocked) for p in points] == [("none", None)]
    assert len(excluded) == 1 and "exclude rule #1" in excluded[0].blocked
    with pytest.raises(ConfigError, match="exclude rule names compression 'int8'"):
        parse_config(tiny_sweep() + "exclude:\n  - {compression: int8}\n")


def test_budgets_change_point_identity() -> None:
    a = expand(parse_config(tiny_sweep()))[0]
    b = expand(parse_config(tiny_sweep().replace("epochs: 1", "epochs: 2", 1)))[0]
    assert a.key != b.key
