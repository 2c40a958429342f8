"""The one place that imports torchvision.

torchvision 0.28's compiled extension (``_C``) is built against CUDA torch. On the CPU
build of torch 2.13 it fails to load, and ``import torchvision`` then dies in
``torchvision/_meta_registrations.py``, which registers fake kernels for
``torchvision::nms`` and ``torchvision::qnms`` unconditionally, operators that only the
extension would have defined. Defining those two schemas ourselves (without kernels)
before the import lets the pure-Python parts (models, datasets, transforms) work; the
detection ops (``torchvision.ops.nms`` and friends) stay unavailable, as they would be
anyway without the extension. Where the extension does load (a CUDA machine), nothing
is changed.

Beware: ``pytorch_lightning`` imports ``torchmetrics``, which imports torchvision when it
is installed, so :func:`install_torchvision_shim` must run before ``pytorch_lightning`` or
``torchmetrics`` is first imported.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import threading
from pathlib import Path
from types import ModuleType

import torch

# From torchvision's C++ sources (csrc/ops/nms.cpp; qnms in
# csrc/ops/quantized/cpu/qnms_kernel.cpp has the same signature).
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}

_lock = threading.Lock()
# Kept for the life of the process: a torch.library.Library deregisters the operators it
# defined when it is garbage collected.
_shim_library: torch.library.Library | None = None
_extension_loaded: bool | None = None


def _op_exists(name: str) -> bool:
    try:
        getattr(torch.ops.torchvision, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def _extension_path() -> Path | None:
    # find_spec on a top-level name locates the package without importing it.
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = Path(location) / f"_C{suffix}"
            if candidate.is_file():
                return candidate
    return None


def _try_load_extension() -> bool:
    """Load torchvision's ``_C`` as torchvision itself does; False when it cannot load."""
    path = _extension_path()
    if path is None:
        return False
    try:
        torch.ops.load_library(str(path))
    except (ImportError, OSError):
        return False
    return True


def install_torchvision_shim() -> bool:
    """Make ``import torchvision`` (direct, or through torchmetrics / Lightning) succeed.

    Cheap and idempotent; does not import torchvision. Returns True when the compiled
    extension loaded (nothing to do), False when the schema shim is in place instead.
    """
    global _shim_library, _extension_loaded
    with _lock:
        if _extension_loaded is None:
            _extension_loaded = _try_load_extension()
        if _extension_loaded:
            return True
        missing = [schema for name, schema in _SCHEMAS.items() if not _op_exists(name)]
        if missing:
            if _shim_library is None:
                _shim_library = torch.library.Library("torchvision", "FRAGMENT")
            for schema in missing:
                _shim_library.define(schema)
        return False


def torchvision_extension_loaded() -> bool:
    """Whether torchvision's compiled ops are usable (not on the CPU-only torch build)."""
    return install_torchvision_shim()


def import_torchvision() -> ModuleType:
    """Import torchvision, installing the shim first when its extension cannot load."""
    install_torchvision_shim()
    return importlib.import_module("torchvision")
