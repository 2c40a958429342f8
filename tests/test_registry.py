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


def test_an_option_that_misses_its_layers_contract_fails_at_registration() -> None:
    from dlas.contracts import ContractError

    with pytest.raises(ContractError, match=r"models option 'bad_model'.*missing a required "
                                            r"argument: 'classes'.*fn\(params, "
                                            r"num_classes=\.\.\., input_shape=\.\.\.\)"):
        @registry.register("models", "bad_model", description="wrong signature")
        def bad_model(params, classes, shape):  # noqa: ANN001, ANN202
            return None

    with pytest.raises(ContractError, match=r"compression option 'bad_comp'.*"
                                            r"fn\(params, model, ctx\).*compression/base\.py"):
        @registry.register("compression", "bad_comp", description="one argument short")
        def bad_comp(params, model):  # noqa: ANN001, ANN202
            return model

    with pytest.raises(ContractError, match="pydantic BaseModel"):
        registry.register("targets", "bad_params", params=dict,  # type: ignore[arg-type]
                          description="x")(lambda params: None)

    with pytest.raises(ContractError, match="constraint"):
        registry.register("algorithms", "bad_constraint", description="x",
                          constraints=[lambda point, extra: None])(lambda params: None)
    for layer, name in (("models", "bad_model"), ("compression", "bad_comp"),
                        ("targets", "bad_params"), ("algorithms", "bad_constraint")):
        with pytest.raises(registry.UnknownOptionError):
            registry.get(layer, name)  # nothing half-registered


def test_options_with_defaults_or_catch_alls_fit() -> None:
    @registry.register("models", "flexible_model", description="keywords by **kwargs")
    def flexible(params, **kwargs):  # noqa: ANN001, ANN003, ANN202
        return None

    try:
        assert registry.get("models", "flexible_model").fn is flexible
    finally:
        registry.unregister("models", "flexible_model")
