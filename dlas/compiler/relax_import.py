"""PyTorch -> TVM Relax import (torch.export + TVM's exported-program frontend).

Parameters stay function inputs (detached into a numpy dict) so the imported module
serializes small and the compiler decides when to bind them as constants.

A batch norm right after a conv (inference mode) is folded into the conv's weight and
bias before export, as TVM's Relay pipeline the paper used did (`SimplifyInference` +
`FoldScaleAxis`): the conv's kernel then carries one bias add instead of four
elementwise stages, and a conv of a model with biased convs (VGG) has the structure of
one without (ResNet), so transfer-tuning can reuse schedules across them. The function is
the same up to float rounding; every compiled variant is still verified against the
unfolded PyTorch model.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm

MODULE_FILE = "module.json"
PARAMS_FILE = "params.npz"
META_FILE = "meta.json"


@dataclass
class ImportedModel:
    """A Relax module with detached parameters and its (single) input signature."""

    mod: tvm.IRModule
    params: dict[str, np.ndarray]
    input_shape: tuple[int, ...]
    input_dtype: str


def fold_batchnorms(model):  # noqa: ANN001, ANN201 - torch modules, imported lazily
    """`model` (eval mode) with every conv -> batch norm pair folded into the conv (a
    copy; torch.fx's `fuse`), and how many were folded. The model itself comes back
    (0 folded) when there is nothing to fold, when a conv's weight is computed by a hook
    (pruning reparametrisation: folding would be overwritten) or when torch.fx cannot
    trace it."""
    import torch
    from torch.fx.experimental.optimization import fuse

    mods = list(model.modules())
    bns = sum(isinstance(m, torch.nn.BatchNorm2d) for m in mods)
    hooked = any(m._forward_pre_hooks or hasattr(m, "parametrizations") for m in mods
                 if isinstance(m, torch.nn.Conv2d))
    if not bns or hooked:
        return model, 0
    try:
        fused = fuse(model).eval()
    except Exception:  # noqa: BLE001 - untraceable (data-dependent control flow): keep it
        return model, 0
    left = sum(isinstance(m, torch.nn.BatchNorm2d) for m in fused.modules())
    return fused, bns - left


def import_torch_model(
    model, input_shape: tuple[int, ...], input_dtype: str = "float32",
    fold_batchnorm: bool = True,
) -> ImportedModel:
    """Export `model` (put in eval mode) for one static input shape and import it to Relax
    (conv -> batch norm pairs folded first, unless `fold_batchnorm` is False)."""
    import torch
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.torch import from_exported_program

    model = model.eval()
    if fold_batchnorm:
        model, _ = fold_batchnorms(model)
    example = torch.zeros(tuple(input_shape), dtype=getattr(torch, input_dtype))
    with torch.no_grad(), warnings.catch_warnings():
        # torch.export's pytree code warns about its own deprecations on every export.
        warnings.simplefilter("ignore", FutureWarning)
        exported = torch.export.export(model, (example,))
        mod = from_exported_program(
            exported, keep_params_as_input=True, unwrap_unit_return_tuple=True
        )
    mod, detached = detach_params(mod)
    main = mod["main"]
    num_input = int(main.attrs["num_input"])
    names = [var.name for var in main.params[num_input:]]
    values = detached.get("main", [])
    if len(names) != len(values):
        raise RuntimeError(f"frontend returned {len(values)} params for {len(names)} inputs")
    params = {name: value.numpy() for name, value in zip(names, values, strict=True)}
    return ImportedModel(mod, params, tuple(int(d) for d in input_shape), input_dtype)


def save_imported(imp: ImportedModel, directory: Path) -> None:
    """Write module (TVM JSON), parameters (npz) and input signature to `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MODULE_FILE).write_text(tvm.ir.save_json(imp.mod))
    # Parameter names can hold characters npz keys dislike; store them by position.
    names = list(imp.params)
    np.savez(directory / PARAMS_FILE, *[imp.params[n] for n in names])
    meta = {"input_shape": list(imp.input_shape), "input_dtype": imp.input_dtype, "params": names}
    (directory / META_FILE).write_text(json.dumps(meta, indent=1))


def load_imported(directory: Path) -> ImportedModel:
    """Inverse of `save_imported`."""
    directory = Path(directory)
    mod = tvm.ir.load_json((directory / MODULE_FILE).read_text())
    meta = json.loads((directory / META_FILE).read_text())
    with np.load(directory / PARAMS_FILE) as arrays:
        params = {name: arrays[f"arr_{i}"] for i, name in enumerate(meta["params"])}
    return ImportedModel(mod, params, tuple(meta["input_shape"]), meta["input_dtype"])
