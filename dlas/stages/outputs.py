"""The typed outputs stages hand to their dependants: what `Stage.load` returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlas.stages.facts import CompileFacts, CompressFacts, ImportFacts, TrainFacts


@dataclass
class TrainedModel:
    """The trained (or pretrained) PyTorch module, in eval mode."""

    model: Any
    facts: TrainFacts


@dataclass
class CompressedModel:
    """The compressed PyTorch module (float32 weights), its facts, and its entry's folder
    (an int8 model's quantized ONNX lives there)."""

    model: Any
    facts: CompressFacts
    path: Path

    def quantized_onnx(self) -> bytes | None:
        deployment = self.facts.deployment
        if deployment is None or deployment.onnx is None:
            return None
        return (self.path / deployment.onnx).read_bytes()


@dataclass
class ImportedModule:
    """The Relax module and the outputs its compiled form must give."""

    model: Any
    inputs: np.ndarray
    #: What the compiled model must compute (PyTorch's, or the int8 QDQ model's literal
    #: function).
    outputs: np.ndarray
    #: The float32 PyTorch model's outputs on the same inputs.
    fp32_outputs: np.ndarray
    facts: ImportFacts


@dataclass
class CompiledLibrary:
    """The exported library of one variant (model x algorithm x tuning x target)."""

    executable: Path
    facts: CompileFacts
