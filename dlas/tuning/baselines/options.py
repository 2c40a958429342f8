"""The baseline options dlas ships on the systems-software layer (tag `baseline`).

`tuning: [none, pytorch, onnxruntime]` measures, beside every untuned TVM variant, the
same compressed model in PyTorch eager and in ONNX Runtime, once per model / compression /
target (the algorithms axis does not apply to a baseline, see `dlas.sweep.grid`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import BASELINE_TAG, NoParams, register
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


@register("tuning", "pytorch", tags=BASELINE_TAGS,
          constraints=[local_cpu_or_gpu, pytorch_precision],
          description="baseline: PyTorch eager on the compressed module (float16: a float16 "
                      "copy), torch.set_num_threads = the target's threads; on a cuda "
                      "target, on this machine's GPU; verified and timed as TVM points are. "
                      "Local CPU or GPU; no int8")
def pytorch(params: NoParams, model: BaselineModel) -> Peer:
    from dlas.tuning.baselines.torch_eager import TorchPeer

    return TorchPeer(model)


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
