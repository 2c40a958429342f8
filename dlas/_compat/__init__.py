"""Workarounds for third-party packages that do not import cleanly in this environment."""

from dlas._compat.torchvision import (
    import_torchvision,
    install_torchvision_shim,
    torchvision_extension_loaded,
)

__all__ = ["import_torchvision", "install_torchvision_shim", "torchvision_extension_loaded"]
