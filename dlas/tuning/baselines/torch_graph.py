"""PyTorch replayed from a CUDA graph: the peer of TVM's `cuda(cuda_graph=True)` rows.

At batch 1 a CIFAR model's kernels take microseconds each on a large GPU, so PyTorch eager
is bound by Python and the launches, not by its kernels. Capturing the forward pass once
(`torch.cuda.CUDAGraph`, after warm-up calls on a side stream, as PyTorch's documentation
asks) and replaying it launches the whole model at once: what PyTorch's kernels cost
without its launch overhead.

A graph reads its input from, and writes its output to, the tensors it was captured
with, so every call copies the input into the static input first (as a deployment
would), and the output is read from the static one. Verification runs the same replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dlas.tuning.baselines.base import BaselineModel, BaselineNotRunnable
from dlas.tuning.baselines.torch_eager import TorchPeer

#: Calls run on a side stream before the capture (cuDNN picks its algorithms, lazy
#: buffers get allocated), so none of that is recorded.
WARMUP_CALLS = 3


def graph_reason(device: str) -> str | None:
    """Why a CUDA-graph peer cannot run on `device`, or None."""
    return None if device == "cuda" else (
        "PyTorch's CUDA-graph mode needs a cuda target (a graph replays GPU kernels); "
        "on a CPU compare with `pytorch` or `pytorch(mode=compile)`")


class TorchGraphPeer(TorchPeer):
    """The module's batch-1 forward pass captured in a CUDA graph and replayed."""

    mode = "cuda_graph"

    def __init__(self, model: BaselineModel, tf32: bool = False) -> None:
        reason = graph_reason(model.device)
        if reason:
            raise BaselineNotRunnable(reason)
        super().__init__(model, tf32)
        import torch

        self.static_in = torch.zeros((1, *model.input_shape), device=self.device,
                                     dtype=self.dtype)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.module(self.static_in)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(self.graph):
            self.static_out = self.module(self.static_in)
        torch.cuda.synchronize()

    def _replay(self, x: np.ndarray) -> Any:
        self.static_in.copy_(self._tensor(x))
        self.graph.replay()
        return self.static_out

    def run(self, inputs: np.ndarray) -> np.ndarray:
        """Each sample through the graph (it was captured at batch 1)."""
        outs = [self._replay(inputs[i:i + 1]).float().cpu().numpy()
                for i in range(inputs.shape[0])]
        return np.concatenate(outs).astype(np.float32)

    def bind(self, x: np.ndarray) -> Callable[[], object]:
        import torch

        tensor, static_in, graph = self._tensor(x), self.static_in, self.graph
        synchronize = torch.cuda.synchronize

        def replay() -> object:
            static_in.copy_(tensor)  # on the device: what a deployment's call does
            graph.replay()
            synchronize()
            return self.static_out

        return replay

    def close(self) -> None:
        del self.graph
        super().close()
