"""Quantized (QDQ) ONNX models -> TVM Relax with real int8 convolutions.

ONNX Runtime's static quantization writes a QDQ model: every quantized tensor is a
`QuantizeLinear -> DequantizeLinear` pair and every conv reads dequantized (float) data and
weights. TVM's ONNX frontend imports that literally, i.e. as fake quantization: dequantize,
then a float32 conv. `rewrite_int8_convs` turns each

    conv2d(dequantize(x_q, s_x, 0), dequantize(w_q, s_w, 0, axis=0))        (float32)

into the integer computation it stands for,

    astype(conv2d(x_q, w_q, out_dtype="int32"), "float32") * (s_x * s_w)     (per channel)

so the conv itself is int8 x int8 with int32 accumulation and reaches the algorithm layer
as a `(int8 | uint8, int8, int32)` `ConvSpec`. The requantization is the float epilogue
that follows (scale, bias, ReLU, the next `quantize`), which the compiler fuses into the
conv's PrimFunc. Zero points must be 0 (symmetric quantization): with a non-zero
activation zero point the padded border would have to hold the zero point, not 0, which a
plain conv cannot express; such convs stay fake-quantized and are reported.
Everything that is not a conv keeps the QDQ model's (float) semantics, as ONNX Runtime
defines them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

from .relax_import import ImportedModel

INT8_CONV_DTYPES = {("int8", "int8", "int32"), ("uint8", "int8", "int32")}


@dataclass
class Int8ConvReport:
    """Which convs became integer convs, and why any others did not."""

    rewritten: list[str] = field(default_factory=list)
    kept_float: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"rewritten": list(self.rewritten), "kept_float": list(self.kept_float)}


def _const(expr: relax.Expr) -> np.ndarray:
    return expr.value.numpy()


def _scalar(values: np.ndarray) -> bool:
    return values.size == 1


def _describe(call: relax.Call) -> str:
    data, weight = call.args[0].ty, call.args[1].ty
    shape = [int(d) for d in data.shape] if data.shape is not None else "?"
    kernel = [int(d) for d in weight.shape] if weight.shape is not None else "?"
    return f"conv2d data {shape} weight {kernel} groups {int(call.attrs.groups)}"


def rewrite_int8_convs(mod: tvm.IRModule) -> tuple[tvm.IRModule, Int8ConvReport]:
    """Rewrite fake-quantized convs of every Relax function into int8 convs (see module doc)."""
    report = Int8ConvReport()
    data_q, weight_q = wildcard(), is_const()
    data_scale, data_zp = is_const(), is_const()
    weight_scale, weight_zp = is_const(), is_const()
    data_dq = is_op("relax.dequantize")(data_q, data_scale, data_zp)
    weight_dq = is_op("relax.dequantize")(weight_q, weight_scale, weight_zp)
    conv = is_op("relax.nn.conv2d")(data_dq, weight_dq)

    def rewriter(orig: relax.Call, m: dict) -> relax.Expr:
        reason = _int8_reason(orig, m[data_q], m[weight_q], m[data_dq], m[weight_dq],
                              _const(m[data_scale]), _const(m[data_zp]),
                              _const(m[weight_scale]), _const(m[weight_zp]))
        if reason is not None:
            report.kept_float.append(f"{_describe(orig)}: {reason}")
            return orig
        attrs = orig.attrs
        out_channels = int(orig.args[1].ty.shape[0])
        scale = (_const(m[data_scale]).astype(np.float32).reshape(())
                 * _const(m[weight_scale]).astype(np.float32).reshape(-1))
        scale = np.broadcast_to(scale, (out_channels,)).reshape(1, out_channels, 1, 1)
        acc = relax.op.nn.conv2d(
            m[data_q], m[weight_q], strides=attrs.strides, padding=attrs.padding,
            dilation=attrs.dilation, groups=int(attrs.groups), data_layout="NCHW",
            kernel_layout="OIHW", out_layout="NCHW", out_dtype="int32",
        )
        report.rewritten.append(_describe(orig))
        return relax.op.multiply(relax.op.astype(acc, "float32"),
                                 relax.const(np.ascontiguousarray(scale), "float32"))

    out = tvm.IRModule()
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            func = rewrite_call(conv, rewriter, func)
        out[gvar] = func
    out = relax.transform.DeadCodeElimination()(out.with_attrs(mod.attrs) if mod.attrs else out)
    return out, report


def _int8_reason(call: relax.Call, x_q: relax.Expr, w_q: relax.Expr, x_dq: relax.Call,
                 w_dq: relax.Call, x_scale: np.ndarray, x_zp: np.ndarray,
                 w_scale: np.ndarray, w_zp: np.ndarray) -> str | None:
    """Why this conv cannot become an int8 conv, or None if it can."""
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return f"layout {layouts} is not NCHW/OIHW"
    x_dtype, w_dtype = str(x_q.ty.dtype), str(w_q.ty.dtype)
    if (x_dtype, w_dtype, "int32") not in INT8_CONV_DTYPES:
        return f"quantized dtypes (data, weight) = ({x_dtype}, {w_dtype}) are not (u)int8, int8"
    if not _scalar(x_scale) or not _scalar(x_zp):
        return "activations are not quantized per tensor"
    if np.any(x_zp != 0) or np.any(w_zp != 0):
        return "non-zero zero point (asymmetric quantization); use symmetric int8"
    out_channels = int(call.args[1].ty.shape[0])
    if not _scalar(w_scale) and (w_scale.size != out_channels or int(w_dq.attrs.axis) != 0):
        return f"weight scale of shape {w_scale.shape} is not per output channel (axis 0)"
    return None


def import_qdq_onnx(
    model: Any, input_shape: tuple[int, ...] | None = None
) -> tuple[ImportedModel, Int8ConvReport]:
    """Import a QDQ ONNX model (ModelProto, bytes or path) with its convs made int8.

    Weights are embedded as constants (they must be known to check zero points), so the
    returned `ImportedModel` has no separate parameters.
    """
    from tvm.relax.frontend.onnx import from_onnx

    model = _load_onnx(model)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise ValueError(f"expected a model with one input, got {[i.name for i in inputs]}")
    graph_input = inputs[0]
    if input_shape is None:
        dims = graph_input.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ValueError(f"input '{graph_input.name}' has a dynamic shape; pass input_shape")
        input_shape = tuple(int(d.dim_value) for d in dims)
    input_shape = tuple(int(d) for d in input_shape)
    mod = from_onnx(model, shape_dict={graph_input.name: list(input_shape)},
                    dtype_dict={graph_input.name: "float32"}, keep_params_in_input=False)
    mod, report = rewrite_int8_convs(mod)
    return ImportedModel(mod, {}, input_shape, "float32"), report


def output_step(model: Any) -> float | None:
    """The quantization step of the model's output: the scale of the per-tensor
    DequantizeLinear that produces it, or None if the output is not dequantized."""
    from onnx import numpy_helper

    graph = _load_onnx(model).graph
    if len(graph.output) != 1:
        return None
    constants = {init.name: init for init in graph.initializer}
    producer = next((n for n in graph.node if graph.output[0].name in n.output), None)
    if producer is None or producer.op_type != "DequantizeLinear":
        return None
    scale = constants.get(producer.input[1])
    if scale is None:
        return None
    values = numpy_helper.to_array(scale)
    return float(values.reshape(-1)[0]) if values.size == 1 else None


def _load_onnx(model: Any) -> Any:
    import onnx

    if isinstance(model, str | Path):
        return onnx.load(str(model))
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return model


def conv_dtypes(mod: tvm.IRModule) -> list[tuple[str, str, str]]:
    """(data, weight, out) dtypes of every relax.nn.conv2d in `mod`, in program order."""
    found: list[tuple[str, str, str]] = []
    conv_op = tvm.ir.Op.get("relax.nn.conv2d")

    def visit(expr: relax.Expr) -> None:
        if isinstance(expr, relax.Call) and expr.op.same_as(conv_op):
            found.append((str(expr.args[0].ty.dtype), str(expr.args[1].ty.dtype),
                          str(expr.ty.dtype)))

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found
