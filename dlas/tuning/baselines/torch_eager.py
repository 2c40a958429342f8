"""PyTorch eager as a baseline: the compressed module itself, intra-op threads matched; on
a cuda target, on this machine's GPU (each timed call waits for the GPU to finish, as TVM's
time evaluator does for a GPU function).

On a GPU, float32 convolutions and matmuls run in IEEE float32 unless the option allows
TensorFloat-32 (`tf32`): cuDNN's default is TF32 for convolutions, which rounds inputs to
10 mantissa bits, so a default PyTorch row computes another function than the TVM rows it
is compared with (found on the H200: up to 6e-3 from the reference, TVM 1e-5). The row's
`gpu_math` says which ran. The other PyTorch modes (`torch_graph`, `torch_compiled`)
build on this peer."""

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
    """The module in eval/inference mode; float16 points run a float16 copy of it, cuda
    points a copy on the GPU."""

    runtime = "pytorch"
    mode = "eager"

    def __init__(self, model: BaselineModel, tf32: bool = False) -> None:
        import torch

        if model.precision not in _DTYPES:
            raise BaselineNotRunnable(int8_reason() if model.precision == "int8" else
                                      f"PyTorch eager has no {model.precision} path here")
        self.dtype = getattr(torch, model.precision)
        self.device = torch.device("cuda" if model.device == "cuda" else "cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise BaselineNotRunnable(f"this PyTorch ({torch.__version__}) has no CUDA GPU "
                                      "to run on")
        module = model.model
        if self.dtype != torch.float32 or self.device.type != "cpu":
            # the module is shared with other points: copy before changing it
            module = copy.deepcopy(module).to(device=self.device, dtype=self.dtype)
        self.module = module.eval()
        # process-wide: restored by close() so training and other points are unaffected
        self._previous_threads = torch.get_num_threads()
        torch.set_num_threads(model.threads)
        self.threads = torch.get_num_threads()
        self._previous_tf32 = (torch.backends.cudnn.allow_tf32,
                               torch.backends.cuda.matmul.allow_tf32)
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
        self.tf32 = tf32

    def _tensor(self, x: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(
            device=self.device, dtype=self.dtype)

    def run(self, inputs: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            out = self.module(self._tensor(inputs))
        return out.float().cpu().numpy().astype(np.float32)

    def bind(self, x: np.ndarray) -> Callable[[], object]:
        import torch

        module, tensor = self.module, self._tensor(x)
        if self.device.type != "cuda":
            def call() -> object:
                with torch.inference_mode():
                    return module(tensor)

            return call
        synchronize = torch.cuda.synchronize

        def call_on_gpu() -> object:
            with torch.inference_mode():
                out = module(tensor)
            synchronize()  # the launch returns at once: time the work, not the launch
            return out

        return call_on_gpu

    def info(self) -> dict[str, Any]:
        import os

        import torch

        device = (torch.cuda.get_device_name(self.device) if self.device.type == "cuda"
                  else "cpu")
        math = (("tf32" if self.tf32 else "ieee float32") if self.dtype == torch.float32
                else str(self.dtype).removeprefix("torch."))
        return {"runtime": self.runtime, "version": torch.__version__, "mode": self.mode,
                "dtype": str(self.dtype).removeprefix("torch."), "device": device,
                "gpu_math": math if self.device.type == "cuda" else None,
                "threads": self.threads,
                "interop_threads": torch.get_num_interop_threads(),
                # the CPUs the timing worker pinned OpenMP's threads to, if it did
                # (dlas.runner.timing_worker)
                "pinned_cpus": os.environ.get("DLAS_OMP_PINNED")}

    def close(self) -> None:
        import torch

        torch.set_num_threads(self._previous_threads)
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = \
            self._previous_tf32
