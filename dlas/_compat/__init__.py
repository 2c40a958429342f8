"""Workarounds for third-party packages that do not import cleanly in this environment.

The torchvision helpers are loaded on first use: `dlas/__init__.py` imports
`dlas._compat.tvm_import` in every process, before torch is needed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["import_torchvision", "install_torchvision_shim", "torchvision_extension_loaded"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dlas._compat import torchvision

        return getattr(torchvision, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
