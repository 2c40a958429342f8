"""The baseline options dlas ships on the systems-software layer (tag `baseline`).

`tuning: [none, pytorch, onnxruntime]` measures, beside every untuned TVM variant, the
same compressed model in PyTorch eager and in ONNX Runtime, once per model / compression /
target (the algorithms axis does not apply to a baseline, see `dlas.sweep.grid`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import BASELINE_TAG, register
from dlas.tuning.baselines.base import (
    BaselineModel,
    Peer,
    local_cpu_only,
    local_cpu_or_gpu,
    precision_of,
)
from dlas.tuning.baselines.torch_eager import int8_reason

BASELINE_TAGS = {BASELINE_TAG}


def pytorch_precision(point: Any) -> str | None:
    return int8_reason() if precision_of(point) == "int8" else None


class TorchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["eager", "cuda_graph", "compile"] = Field(
        "eager", description="eager: the module as it is; cuda_graph: its batch-1 forward "
                             "captured in a CUDA graph and replayed (cuda targets); compile: "
                             "torch.compile (TorchInductor) with `compile_mode`")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = Field(
        "reduce-overhead", description="torch.compile's mode, with mode=compile "
                                       "(reduce-overhead replays CUDA graphs on a GPU)")
    tf32: bool = Field(
        False, description="on a GPU, let float32 convolutions and matmuls use "
                           "TensorFloat-32 (cuDNN's own default); off: IEEE float32, the "
                           "function TVM's float32 rows compute")


def pytorch_mode(point: Any) -> str | None:
    """CUDA-graph replay needs a GPU target; compile_mode means something only with
    mode=compile."""
    from dlas.targets.resolve import resolve_target
    from dlas.tuning.baselines.torch_graph import graph_reason

    params = point.tuning.params
    if params.mode == "cuda_graph":
        return graph_reason(resolve_target(point).device)
    if params.mode != "compile" and "compile_mode" in params.model_fields_set:
        return "compile_mode is torch.compile's: set mode: compile with it"
    return None


@register("tuning", "pytorch", params=TorchParams, tags=BASELINE_TAGS,
          constraints=[local_cpu_or_gpu, pytorch_precision, pytorch_mode],
          description="baseline: PyTorch on the compressed module (float16: a float16 "
                      "copy), eager, replayed from a CUDA graph, or torch.compile'd; "
                      "torch.set_num_threads = the target's threads; on a cuda target, on "
                      "this machine's GPU; verified and timed as TVM points are. Local CPU "
                      "or GPU; no int8")
def pytorch(params: TorchParams, model: BaselineModel) -> Peer:
    if params.mode == "cuda_graph":
        from dlas.tuning.baselines.torch_graph import TorchGraphPeer

        return TorchGraphPeer(model, params.tf32)
    if params.mode == "compile":
        from dlas.tuning.baselines.torch_compiled import TorchCompiledPeer

        return TorchCompiledPeer(model, params.compile_mode, params.tf32)
    from dlas.tuning.baselines.torch_eager import TorchPeer

    return TorchPeer(model, params.tf32)


class OrtParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    graph_optimization: Literal["disabled", "basic", "extended", "all"] = Field(
        "all", description="ONNX Runtime graph optimization level (its default: all)")


@register("tuning", "onnxruntime", params=OrtParams, tags=BASELINE_TAGS,
          constraints=[local_cpu_only],
          description="baseline: ONNX Runtime, CPU execution provider, intra-op threads = the "
                      "target's, 1 inter-op thread, sequential; int8 points run the compress "
                      "stage's QDQ model, others the ONNX export. Local CPU only")
def onnxruntime(params: OrtParams, model: BaselineModel) -> Peer:
    from dlas.tuning.baselines.ort import OrtPeer

    return OrtPeer(model, params.graph_optimization)
