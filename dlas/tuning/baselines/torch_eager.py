"""PyTorch eager as a baseline: the compressed module itself, intra-op threads matched."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from dlas.tuning.baselines.base import BaselineModel, BaselineNotRunnable, Peer

_DTYPES = ("float32", "float16")


def int8_reason() -> str:
    return ("PyTorch eager cannot run the int8 QDQ model ONNX Runtime quantized (the "
            "compressed PyTorch module is its float32 original); compare int8 with "
            "onnxruntime")


class TorchPeer(Peer):
    """The module in eval/inference mode; float16 points run a float16 copy of it."""

    runtime = "pytorch"

    def __init__(self, model: BaselineModel) -> None:
        import torch

        if model.precision not in _DTYPES:
            raise BaselineNotRunnable(int8_reason() if model.precision == "int8" else
                                      f"PyTorch eager has no {model.precision} path here")
        self.dtype = getattr(torch, model.precision)
        module = model.model
        if self.dtype != torch.float32:  # the module is shared with other points: copy
            module = copy.deepcopy(module).to(self.dtype)
        self.module = module.eval()
        # process-wide: restored by close() so training and other points are unaffected
        self._previous_threads = torch.get_num_threads()
        torch.set_num_threads(model.threads)
        self.threads = torch.get_num_threads()

    def _tensor(self, x: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.dtype)

    def run(self, inputs: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            out = self.module(self._tensor(inputs))
        return out.float().numpy().astype(np.float32)

    def bind(self, x: np.ndarray) -> Callable[[], object]:
        import torch

        module, tensor = self.module, self._tensor(x)

        def call() -> object:
            with torch.inference_mode():
                return module(tensor)

        return call

    def info(self) -> dict[str, Any]:
        import os

        import torch

        return {"runtime": self.runtime, "version": torch.__version__, "mode": "eager",
                "dtype": str(self.dtype).removeprefix("torch."), "threads": self.threads,
                "interop_threads": torch.get_num_interop_threads(),
                # the CPUs the timing worker pinned OpenMP's threads to, if it did
                # (dlas.runner.timing_worker)
                "pinned_cpus": os.environ.get("DLAS_OMP_PINNED")}

    def close(self) -> None:
        import torch

        torch.set_num_threads(self._previous_threads)
