"""Sweep config validation and grid expansion."""

from __future__ import annotations

from pathlib import Path

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


def test_exclude_rules_name_one_parameter_setting_by_its_label() -> None:
    """`direct(layout=NCHWc)` leaves out that setting only; `direct` leaves out all."""
    text = tiny_sweep(compression=["none", "weight_pruning"], algorithms=[
        "direct", "{name: direct, params: {layout: NCHWc}}"]) + (
        'exclude:\n  - {compression: weight_pruning, algorithms: "direct(layout=NCHWc)"}\n')
    points = expand(parse_config(text))
    assert sorted((p.compression.name, p.algorithms.label) for p in points) == [
        ("none", "direct"), ("none", "direct(layout=NCHWc)"), ("weight_pruning", "direct")]
    with pytest.raises(ConfigError, match=r"direct\(layout=NHWC\)', which this sweep"):
        parse_config(tiny_sweep(algorithms=["direct"]) +
                     'exclude:\n  - {algorithms: "direct(layout=NHWC)"}\n')


def test_budgets_change_point_identity() -> None:
    a = expand(parse_config(tiny_sweep()))[0]
    b = expand(parse_config(tiny_sweep().replace("epochs: 1", "epochs: 2", 1)))[0]
    assert a.key != b.key


# --- bad input, by class: each is a ConfigError naming file:line and what to do -----------

BASE = "name: x\ndatasets: [digits]\nmodels: [resnet18]\n"


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="s.yaml")
    return str(err.value)


@pytest.mark.parametrize("layer", list(registry.LAYERS))
@pytest.mark.parametrize("empty", ["[]", "", "null"])
def test_empty_axis_is_an_error(layer: str, empty: str) -> None:
    lines = [f"{key}: {layer_value}" for key, layer_value in
             [("name", "x"), ("datasets", "[digits]"), ("models", "[resnet18]")]
             if key != layer]
    msg = _error("\n".join(lines) + f"\n{layer}: {empty}\n")
    assert f"s.yaml:{len(lines) + 1}: '{layer}' lists no options" in msg
    assert "name at least one" in msg


@pytest.mark.parametrize("axis, expected", [
    ("algorithms: [direct, gemm, direct]", "s.yaml:4: algorithms option 'direct' is listed "
                                           "twice (algorithms[0] and algorithms[2])"),
    ("algorithms:\n  - name: direct\n  - gemm\n  - direct",
     "s.yaml:7: algorithms option 'direct' is listed twice (lines 5 and 7"),
    # the same choice written differently: parameters are compared once validated
    ("compression:\n  - name: weight_pruning\n    params: {levels: [0.5, 0.7]}\n"
     "  - name: weight_pruning\n    params:\n      levels: [0.50, 0.7]\n      max_drop: 0.01",
     "s.yaml:7: compression option 'weight_pruning' is listed twice (lines 5 and 7"),
    ("targets: [host, {name: host, params: {}}]", "targets option 'host' is listed twice"),
    ("datasets: [digits]", "key 'datasets' is written twice"),
])
def test_same_choice_twice_on_an_axis_is_an_error(axis: str, expected: str) -> None:
    assert expected in _error(BASE + axis + "\n")


def test_different_params_of_one_option_are_two_choices() -> None:
    config = parse_config(BASE + "compression:\n  - name: weight_pruning\n"
                                 "    params: {level: 0.5}\n  - name: weight_pruning\n"
                                 "    params: {level: 0.7}\n")
    points = expand(config)
    assert len(points) == 2 and len({p.key for p in points}) == 2


def test_expand_refuses_duplicate_points_that_skipped_validation() -> None:
    config = parse_config(BASE)
    config.algorithms = config.algorithms * 2  # what parse_config would have rejected
    with pytest.raises(ConfigError, match="lists the point .* twice"):
        expand(config)


@pytest.mark.parametrize("text, line, first", [
    (BASE + "name: y\n", 4, "line 1"),
    (BASE + "budgets:\n  epochs: 1\n  seed: 2\n  epochs: 2\n", 7, "line 5"),
    (BASE + "budgets: {epochs: 1, epochs: 2}\n", 4, "column 11 of this line"),
    (BASE + "compression:\n  - name: weight_pruning\n    params:\n      level: 0.5\n"
            "      level: 0.7\n", 8, "line 7"),
    (BASE + "exclude:\n  - {models: resnet18, models: vgg16}\n", 5, "column 6 of this line"),
])
def test_key_written_twice_in_a_mapping_is_an_error(text: str, line: int, first: str) -> None:
    msg = _error(text)
    assert f"s.yaml:{line}: key '" in msg and f"is written twice in the same mapping " \
                                              f"(first at {first})" in msg


def test_yaml_merge_keys_are_not_duplicates() -> None:
    text = BASE + ("compression:\n  - name: weight_pruning\n    params: &p {level: 0.5}\n"
                   "  - name: weight_pruning\n    params:\n      <<: *p\n      level: 0.7\n")
    assert len(expand(parse_config(text))) == 2


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfe name: x\n", "s.yaml:1: not UTF-8 text (byte 0xff at offset 0)"),
    (b"name: x\n# caf\xe9\n", "s.yaml:2: not UTF-8 text"),
    (b"", "s.yaml: the file is empty"),
    (b"# only a comment\n\n", "s.yaml: the file is empty"),
    (b"- digits\n- resnet18\n", "the sweep config is a YAML list, not a mapping"),
    (b"just text\n", "the sweep config is a YAML str, not a mapping"),
    (b"name: [x\n", "not valid YAML"),
])
def test_file_that_is_no_sweep_config(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert expected in str(err.value).replace(str(path), "s.yaml")


def test_directory_or_missing_file_as_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory; give the path of a sweep config"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="sweep config not found"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize("budgets, expected", [
    ("{epochs: -1}", "'budgets.epochs': Input should be greater than or equal to 0"),
    ("{measure_repeat: 0}", "'budgets.measure_repeat': Input should be greater than or equal"),
    ("{seed: -3}", "'budgets.seed': Input should be greater than or equal to 0"),
    ("{epochs: yes}", "'budgets.epochs': Input should be a valid integer (got True)"),
    ("{epochs: 2.5}", "'budgets.epochs': Input should be a valid integer"),
    ("{data_fraction: 0}", "'budgets.data_fraction': Input should be greater than 0"),
    ("{timing_passes: 0}", "'budgets.timing_passes': Input should be greater than or equal "
                           "to 1"),
    ("{timing_passes: 21}", "'budgets.timing_passes': Input should be less than or equal "
                            "to 20"),
    ("[1, 2]", "'budgets': Input should be a valid dictionary"),
])
def test_nonsense_budgets(budgets: str, expected: str) -> None:
    assert f"s.yaml:4: {expected}" in _error(BASE + f"budgets: {budgets}\n")


@pytest.mark.parametrize("extra, expected", [
    ("algorithm: [direct]", "s.yaml:4: unknown key 'algorithm'. Did you mean 'algorithms'?"),
    ("budgets: {epoch: 1}", "s.yaml:4: unknown key 'budgets.epoch'. Did you mean 'epochs'?"),
    ("algorithms:\n  - name: direct\n    parmas: {}",
     "s.yaml:6: unknown key 'algorithms[0].parmas'. Did you mean 'params'?"),
    ("compression:\n  - name: weight_pruning\n    params: {maxdrop: 0.1}",
     "s.yaml:6: unknown key 'compression[0].params.maxdrop'. Did you mean 'max_drop'?"),
])
def test_unknown_keys_name_the_nearest_valid_one(extra: str, expected: str) -> None:
    msg = _error(BASE + extra + "\n")
    assert expected in msg and "Valid keys here" in msg


def test_empty_sweep_name() -> None:
    assert "'name': String should have at least 1 character" in _error(
        "name: ''\ndatasets: [digits]\nmodels: [resnet18]\n")


@pytest.mark.parametrize("rule, expected", [
    ("{}", "s.yaml:5: exclude rule #1 is empty, so it would match (and leave out) every "
           "point"),
    ("{models: []}", "s.yaml:5: exclude rule #1 lists no models options"),
    ("{model: resnet18}", "exclude rule names unknown layer 'model'. Did you mean 'models'?"),
    ("{models: vgg16}", "exclude rule names models 'vgg16', which this sweep does not use"),
    ("{models: resnet18}", "s.yaml:4: the exclude rules leave out every point of the grid"),
])
def test_exclude_rules_that_match_nothing_or_everything(rule: str, expected: str) -> None:
    assert expected in _error(BASE + f"exclude:\n  - {rule}\n")


def test_exclude_rules_that_together_leave_out_every_point() -> None:
    text = BASE + ("algorithms: [direct, gemm]\ntuning: [none, onnxruntime]\nexclude:\n"
                   "  - {algorithms: direct}\n  - {algorithms: gemm}\n")
    points = expand(parse_config(text))  # the baseline's points remain: not everything
    assert [p.algorithms.name for p in points] == ["onnxruntime"]
    text += "  - {tuning: onnxruntime}\n"
    assert "leave out every point" in _error(text)


def test_unknown_param_of_a_lax_plugin_schema_is_still_an_error() -> None:
    """A third-party schema without extra="forbid" would drop a misspelled key silently."""

    class Lax(BaseModel):
        threshold: float = 0.5

    class Free(BaseModel):
        model_config = {"extra": "allow"}

    @registry.register("compression", "test_lax", params=Lax, description="test")
    @registry.register("compression", "test_free", params=Free, description="test")
    def _opt(params, model, ctx):  # pragma: no cover - never run
        raise AssertionError

    try:
        msg = _error(BASE + "compression:\n  - name: test_lax\n    params: {treshold: 0.3}\n")
        assert ("s.yaml:6: unknown key 'compression[0].params.treshold'. Did you mean "
                "'threshold'?") in msg
        parse_config(BASE + "compression:\n  - name: test_free\n    params: {anything: 1}\n")
    finally:
        registry.unregister("compression", "test_lax")
        registry.unregister("compression", "test_free")
