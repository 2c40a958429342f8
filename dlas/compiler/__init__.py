"""TVM side of dlas: Relax import, per-algorithm conv lowering, minimal schedules, build.

Names are loaded lazily so that importing an algorithm (which uses the schedule helpers
here) does not pull in torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ImportedModel": "relax_import",
    "import_torch_model": "relax_import",
    "save_imported": "relax_import",
    "load_imported": "relax_import",
    "CompileResult": "build",
    "compile_model": "build",
    "make_target": "build",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
