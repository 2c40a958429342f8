"""ImageNet models: torchvision's definitions, with its pretrained weights when present.

The paper evaluates torchvision's pretrained ImageNet models (it does not train them). No
network here, so weights are only read from disk: an explicit ``weights`` path, or else
torchvision's own checkpoint file in the torch hub cache
(``$TORCH_HOME/hub/checkpoints/<file>``, by default ``~/.cache/torch/hub/checkpoints``),
which is where ``torchvision.models.<arch>(weights=...)`` would have downloaded it.

Without weights the model is randomly initialized: it still compiles and times, but its
accuracy means nothing, so every returned module carries ``dlas_pretrained`` (bool) and
``dlas_weights`` (the file used, or None) for the runner to report accuracy as
unavailable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dlas._compat import import_torchvision

IMAGENET_CLASSES = 1000
INPUT_SHAPE = (3, 224, 224)


@dataclass(frozen=True)
class Architecture:
    """One torchvision ImageNet model and the checkpoint whose accuracy the paper reports."""

    builder: str  # torchvision.models.<builder>
    checkpoint: str  # torchvision's file name for the IMAGENET1K_V1 weights
    top1: float  # torchvision's published top-1 of that checkpoint (the paper's Table 5)
    paper_params: float  # paper, Table 5
    paper_macs: float  # paper, Table 5 (thop convention, see dlas.models.macs)


#: Option name -> architecture. IMAGENET1K_V1 everywhere: those are the weights whose
#: accuracy the paper's Table 5 reports (76.1, 77.1, 77.7, 71.9).
ARCHITECTURES: dict[str, Architecture] = {
    "resnet50": Architecture("resnet50", "resnet50-0676ba61.pth", 76.13, 25.6e6, 4.1e9),
    "densenet161": Architecture("densenet161", "densenet161-8d451a50.pth", 77.138,
                                27.7e6, 7.8e9),
    "efficientnet_b0": Architecture("efficientnet_b0", "efficientnet_b0_rwightman-7f5810bc.pth",
                                    77.692, 5.3e6, 415e6),
    "mobilenetv2_imagenet": Architecture("mobilenet_v2", "mobilenet_v2-b0353104.pth", 71.878,
                                         3.5e6, 327e6),
}


class WeightsNotFoundError(FileNotFoundError):
    """A weights file that was asked for is not there; the message says where we looked."""


def _architecture(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(
            f"unknown ImageNet architecture '{name}'; known: {', '.join(ARCHITECTURES)}"
        ) from None


def hub_checkpoint_path(name: str) -> Path:
    """Where torchvision keeps (would download) the checkpoint of architecture ``name``."""
    return Path(torch.hub.get_dir()) / "checkpoints" / _architecture(name).checkpoint


def find_weights(name: str, weights: str | os.PathLike[str] | None = None) -> Path | None:
    """The weights file to load for ``name``: ``weights`` if given (it must exist), else
    torchvision's checkpoint in the hub cache if present, else None (random init)."""
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise WeightsNotFoundError(
                f"weights file for {name} not found: {path} does not exist (given as the "
                f"model's `weights` parameter). Point `weights` at a torchvision state dict "
                f"for {_architecture(name).builder}, e.g. the file "
                f"{_architecture(name).checkpoint}, or leave it out to use the torch hub "
                f"cache ({hub_checkpoint_path(name).parent})."
            )
        return path
    cached = hub_checkpoint_path(name)
    return cached if cached.is_file() else None


def weights_identity(name: str, weights: str | os.PathLike[str] | None = None,
                     ) -> dict[str, Any] | None:
    """The weights file a build of ``name`` would load, as cache-key material (path, size,
    modification time), or None for random init.

    The model option's parameters alone do not say whether torchvision's checkpoint sits in
    the hub cache, so a cache keyed on them would keep serving a randomly initialized model
    after the weights are installed; adding this to the key avoids that.
    """
    path = find_weights(name, weights)
    if path is None:
        return None
    stat = path.stat()
    return {"path": str(path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


# torchvision renamed DenseNet's `norm.1` -> `norm1` (etc.); its published checkpoints keep
# the old names, which torchvision rewrites on load (models/densenet.py). So do we.
_DENSENET_OLD_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\."
    r"((?:[12])\.(?:weight|bias|running_mean|running_var|num_batches_tracked))$"
)


def _state_dict_of(checkpoint: Any, path: Path) -> dict[str, torch.Tensor]:
    """The state dict inside a checkpoint: plain, or under 'state_dict'/'model' (as training
    scripts save it), with DataParallel's 'module.' prefix dropped."""
    state = checkpoint
    if isinstance(state, Mapping):
        for key in ("state_dict", "model"):
            if isinstance(state.get(key), Mapping):
                state = state[key]
                break
    if not isinstance(state, Mapping) or not all(
        isinstance(v, torch.Tensor) for v in state.values()
    ):
        raise ValueError(f"{path} is not a state dict (a mapping of parameter names to tensors)")
    return {k.removeprefix("module."): v for k, v in state.items()}


def load_weights(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> None:
    """Load ``state`` into ``model`` strictly; old DenseNet key names are rewritten."""
    renamed: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        match = _DENSENET_OLD_KEY.match(key)
        renamed[match.group(1) + match.group(2) if match else key] = value
    try:
        model.load_state_dict(renamed, strict=True)
    except RuntimeError as err:
        raise ValueError(
            f"weights in {source} do not fit {type(model).__name__}: {err}"
        ) from err


def build_imagenet_model(
    name: str,
    *,
    num_classes: int = IMAGENET_CLASSES,
    input_shape: tuple[int, ...] = INPUT_SHAPE,
    weights: str | os.PathLike[str] | None = None,
    require_weights: bool = False,
) -> nn.Module:
    """torchvision's ``name`` with pretrained weights when found (see :func:`find_weights`).

    The module carries ``dlas_pretrained`` and ``dlas_weights``. ``require_weights`` turns
    "no weights found" into an error instead of a randomly initialized model.
    """
    arch = _architecture(name)
    if tuple(input_shape)[0] != 3:
        raise ValueError(f"{name} expects 3-channel images, the dataset gives {input_shape}")
    path = find_weights(name, weights)
    if path is None and require_weights:
        raise WeightsNotFoundError(
            f"no pretrained weights for {name}: {hub_checkpoint_path(name)} does not exist. "
            f"Copy torchvision's {arch.checkpoint} there (or into $TORCH_HOME/hub/checkpoints), "
            f"or set the model's `weights` parameter to its path; set `require_weights: false` "
            f"to run it randomly initialized (timing only, accuracy unavailable)."
        )
    if path is not None and num_classes != IMAGENET_CLASSES:
        raise ValueError(
            f"{name}: pretrained weights ({path}) classify {IMAGENET_CLASSES} ImageNet classes, "
            f"but the dataset has {num_classes}. Use the full ImageNet validation set (all "
            f"{IMAGENET_CLASSES} class folders), or no weights (timing only)."
        )
    tv = import_torchvision()
    model: nn.Module = getattr(tv.models, arch.builder)(weights=None, num_classes=num_classes)
    if path is not None:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        load_weights(model, _state_dict_of(checkpoint, path), str(path))
    model.dlas_pretrained = path is not None
    model.dlas_weights = str(path) if path is not None else None
    return model.eval()
