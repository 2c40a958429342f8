"""Reduced-precision compression options (float16, int8); registered via its own entry point.

The paper's data-type quantization (Section 4.2, Figure 3c):

* `float16`: the whole model converted by TVM (no calibration; the paper saw no accuracy
  loss). The PyTorch model is returned unchanged with a `Float16Conversion`; the runner's
  import stage converts it (`dlas.compiler.precision`).
* `int8`: ONNX Runtime post-training static quantization calibrated on a held-out slice
  of the training set; `int8_uncalibrated`: the same with fixed activation ranges and no
  data (see `dlas.compression.int8`). TVM runs the convs as int8 x int8 -> int32.

Accuracy of these points is measured on the TVM-compiled model (and for int8 also in
ONNX Runtime); `compression_ratio` is the paper's ideal speedup: 2 for float16, 4 for int8.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register

if TYPE_CHECKING:
    from torch import nn

    from dlas.compression.base import CompressionContext, CompressionResult

#: Ideal speedups over float32 (bits saved), as the paper's expected-speedup metric uses.
FLOAT16_RATIO = 2.0
INT8_RATIO = 4.0
#: tags: "quantized" marks reduced-precision options for other options' constraints.
QUANTIZED_TAG = "quantized"


class Float16Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    accumulate: Literal["float32", "float16"] = Field(
        "float32", description="accumulator of conv/matmul (TVM's ToMixedPrecision default: "
                               "float32)")


@register("compression", "float16", params=Float16Params, tags={QUANTIZED_TAG},
          description="whole model in float16, converted by TVM (ToMixedPrecision); "
                      "accuracy measured on the compiled model")
def float16(params: Float16Params, model: nn.Module,
            ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult, Float16Conversion

    return CompressionResult(
        model,
        {"compression_ratio": FLOAT16_RATIO, "precision": "float16",
         "accumulate": params.accumulate},
        deployment=Float16Conversion(accumulate=params.accumulate),
    )


class _Int8Common(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_channel: bool = Field(True, description="one weight scale per output channel")
    reduce_range: bool | Literal["auto"] = Field(
        "auto", description="7-bit weights; auto: on for x86 CPUs without VNNI, where ONNX "
                            "Runtime's fused int8 kernels saturate 8-bit weights")


def _int8_facts(params: _Int8Common) -> dict[str, Any]:
    from dlas.compression.int8 import int8_host_facts

    return int8_host_facts(params.reduce_range)


def _int8_info(params: _Int8Common, **facts: Any) -> dict[str, Any]:
    """The facts every int8 result records: ratio, precision, the quantization settings
    chosen (with why) and the CPU flags they were chosen for."""
    from dlas.compression.int8 import choose_reduce_range

    choice = choose_reduce_range(params.reduce_range)
    return {"compression_ratio": INT8_RATIO, "precision": "int8", **facts,
            "per_channel": params.per_channel, "reduce_range": choice.reduce_range,
            "reduce_range_reason": choice.reason}


class Int8Params(_Int8Common):
    calibration_size: int = Field(
        128, ge=1, description="calibration images (from the dataset's calibration slice)")


@register("compression", "int8", params=Int8Params, tags={QUANTIZED_TAG},
          key_facts=_int8_facts,
          description="int8 post-training static quantization (ONNX Runtime, QDQ, symmetric, "
                      "calibrated on held-out training images); TVM runs int8 convs")
def int8(params: Int8Params, model: nn.Module, ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult, QuantizedOnnx
    from dlas.compression.int8 import calibration_inputs, export_onnx, quantize_qdq

    images, source = calibration_inputs(ctx.bundle, params.calibration_size, ctx.budgets.seed)
    info = _int8_info(params, calibrated=True, calibration=source)
    quantized = quantize_qdq(export_onnx(model, ctx.bundle.input_shape), images,
                             per_channel=params.per_channel, reduce_range=info["reduce_range"])
    return CompressionResult(model, info, deployment=QuantizedOnnx(quantized))


class Int8UncalibratedParams(_Int8Common):
    global_scale: float = Field(
        8.0, gt=0, description="every activation range is [-global_scale, global_scale] "
                               "(TVM relay.quantize's default global scale)")


@register("compression", "int8_uncalibrated", params=Int8UncalibratedParams,
          tags={QUANTIZED_TAG}, key_facts=_int8_facts,
          description="int8 without calibration: one fixed activation range, no data "
                      "(the paper's 'uncalibrated' int8, Figure 3c)")
def int8_uncalibrated(params: Int8UncalibratedParams, model: nn.Module,
                      ctx: CompressionContext) -> CompressionResult:
    from dlas.compression.base import CompressionResult, QuantizedOnnx
    from dlas.compression.int8 import export_onnx, quantize_qdq

    info = _int8_info(params, calibrated=False, global_scale=params.global_scale)
    quantized = quantize_qdq(export_onnx(model, ctx.bundle.input_shape),
                             global_scale=params.global_scale, per_channel=params.per_channel,
                             reduce_range=info["reduce_range"])
    return CompressionResult(model, info, deployment=QuantizedOnnx(quantized))
