"""What each layer calls its options with, checked when an option registers.

Like pluggy checking a hook implementation against its spec: a plugin whose function
cannot take the call its layer makes fails at `register`, naming the contract it missed,
instead of failing at the first sweep point that uses it. The calls below are the ones
the stages make (`dlas/stages/`); docs/plugins.md shows the same table.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


class ContractError(TypeError):
    """An option that does not fit its layer's contract."""


@dataclass(frozen=True)
class Contract:
    #: How the layer calls an option, as users read it.
    signature: str
    #: Where the contract's types live.
    where: str
    #: Arguments passed by position, then by keyword.
    positional: tuple[str, ...]
    keywords: tuple[str, ...] = ()

    def missed_by(self, fn: Callable[..., Any]) -> str | None:
        """Why `fn` cannot take the layer's call, or None."""
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return None  # a builtin or C function: nothing to check
        try:
            sig.bind(*self.positional, **{k: k for k in self.keywords})
        except TypeError as exc:
            return f"{getattr(fn, '__qualname__', fn)}{sig}: {exc}"
        return None


CONTRACTS: dict[str, Contract] = {
    "datasets": Contract("fn(params, seed=...) -> DatasetBundle", "dlas/datasets/base.py",
                         ("params",), ("seed",)),
    "models": Contract("fn(params, num_classes=..., input_shape=...) -> torch.nn.Module",
                       "dlas/models/__init__.py", ("params",), ("num_classes", "input_shape")),
    "compression": Contract("fn(params, model, ctx) -> CompressionResult",
                            "dlas/compression/base.py", ("params", "model", "ctx")),
    "algorithms": Contract("fn(params) -> ConvAlgorithm", "dlas/algorithms/base.py",
                           ("params",)),
    "tuning": Contract("fn(params, ctx) -> ScheduleHook | None (a baseline: fn(params, "
                       "model) -> Peer)", "dlas/tuning/base.py", ("params", "ctx")),
    "targets": Contract("fn(params) -> TargetSpec", "dlas/targets/base.py", ("params",)),
}

#: One-argument callables an option may declare: constraints take the sweep point,
#: key_facts the validated parameters.
_ONE_ARGUMENT = Contract("(point) -> reason | None", "dlas/registry.py", ("point",))


def check_option(layer: str, name: str, fn: Callable[..., Any], params: Any,
                 constraints: list[Callable[[Any], str | None]],
                 key_facts: Callable[[Any], Any] | None, source: str) -> None:
    """Raise `ContractError` when the option does not fit `layer`'s contract."""
    where = f"{layer} option '{name}' ({source})"
    contract = CONTRACTS[layer]
    missed = contract.missed_by(fn)
    if missed:
        raise ContractError(f"{where}: {missed}; the {layer} layer calls "
                            f"{contract.signature} (contract in {contract.where})")
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        raise ContractError(f"{where}: params must be a pydantic BaseModel subclass (the "
                            f"option's parameter schema), got {params!r}")
    for check in constraints:
        missed = _ONE_ARGUMENT.missed_by(check)
        if missed:
            raise ContractError(f"{where}: constraint {missed}; a constraint is called "
                                "as (point) -> reason | None")
    if key_facts is not None:
        missed = _ONE_ARGUMENT.missed_by(key_facts)
        if missed:
            raise ContractError(f"{where}: key_facts {missed}; key_facts is called as "
                                "(params) -> facts")
