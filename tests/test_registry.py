"""The option registry and the entry-point plugin mechanism."""

from __future__ import annotations

import pytest

from dlas import registry
from dlas.cli import main


def test_every_layer_has_builtin_options_from_entry_points() -> None:
    for layer in registry.LAYERS:
        options = registry.list_options(layer)
        assert options, layer
        for opt in options:
            if opt.fn.__module__.startswith("dlas."):
                assert "entry point" in opt.source and opt.source.startswith("dlas ")
            assert opt.description


def test_unknown_option_error() -> None:
    with pytest.raises(registry.UnknownOptionError) as err:
        registry.get("algorithms", "dirct")
    assert "Did you mean 'direct'?" in str(err.value)
    with pytest.raises(ValueError, match="unknown layer"):
        registry.get("layers", "x")


def test_create_validates_params() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        registry.create("datasets", "digits", {"test_fraction": 2.0})


def test_duplicate_name_from_another_module_is_rejected() -> None:
    def fake(params, seed=0):  # defined here, so its module differs from the built-in's
        return None

    with pytest.raises(ValueError, match="registered twice"):
        registry.register("datasets", "digits", description="dup")(fake)


def test_cli_plugins_lists_layers_params_and_sources(capsys: pytest.CaptureFixture) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    for layer in registry.LAYERS:
        assert f"config key: {layer}" in out
    assert "weight_pruning" in out and "sparsity" in out
    assert "entry point" in out
