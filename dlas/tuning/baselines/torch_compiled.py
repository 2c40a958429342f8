"""PyTorch through `torch.compile` (TorchInductor): PyTorch's own compiler as a peer.

Eager PyTorch runs one library kernel per op; Inductor fuses the model into generated
kernels (C++/OpenMP on a CPU, Triton on a GPU), and with `reduce-overhead` replays them
from CUDA graphs on a GPU; `max-autotune` also benchmarks kernel variants while it
compiles. That is the strongest PyTorch a study can put beside TVM, on either device.

The module is compiled for the batch-1 input shape (`dynamic=False`) and compiled in
`__init__` with one call, so neither verification nor the timed calls pay for it; the
seconds it took are in the row's runtime info.
"""

from __future__ import annotations

import time
from typing import Any

from dlas.tuning.baselines.base import BaselineModel
from dlas.tuning.baselines.torch_eager import TorchPeer

#: torch.compile's modes dlas offers (`mode` of torch.compile).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


class TorchCompiledPeer(TorchPeer):
    """The module compiled by torch.compile, called like the eager one."""

    mode = "compile"

    def __init__(self, model: BaselineModel, compile_mode: str = "reduce-overhead",
                 tf32: bool = False) -> None:
        if compile_mode not in COMPILE_MODES:
            raise ValueError(f"compile_mode {compile_mode!r}: one of {COMPILE_MODES}")
        super().__init__(model, tf32)
        import torch

        self.compile_mode = compile_mode
        self.eager = self.module
        start = time.perf_counter()
        self.module = torch.compile(self.eager, mode=compile_mode, dynamic=False)
        with torch.inference_mode():
            # compiles; reduce-overhead records its CUDA graph on the calls after
            for _ in range(3):
                self.module(torch.zeros((1, *model.input_shape), device=self.device,
                                        dtype=self.dtype))
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.compile_s = time.perf_counter() - start

    def info(self) -> dict[str, Any]:
        return super().info() | {"compile_mode": self.compile_mode,
                                 "compile_s": round(self.compile_s, 2)}

    def close(self) -> None:
        import torch

        torch._dynamo.reset()  # the compiled graph and its guards go with the peer
        super().close()
