"""Per-operator profiles of the baseline runtimes, from their own profilers.

TVM's layers are timed one kernel at a time (`dlas.profile.tvm_kernels`); a baseline's
kernels cannot be called on their own, so its runtime's profiler times them inside whole
inferences instead:

* ONNX Runtime: a second session of the same model with the same settings as `OrtPeer`
  (intra-op threads, one inter-op thread, sequential, the same graph optimisation level,
  pinned the same way) and `enable_profiling`. Its trace has one `<node>_kernel_time`
  event per executed node and run (the kernel alone, not the executor around it) and one
  `model_run` event per run (the whole inference the profiler saw).
* PyTorch: `torch.profiler` over eager forwards, with every leaf module's call wrapped in
  a `record_function` range by forward hooks, so each layer keeps its `nn.Module` (a conv's
  stride, padding, groups and weight) rather than being an anonymous `aten::conv2d`.

Why the work figures (`macs`, shapes, `nnz`) are the model's and not the kernel's: ONNX
Runtime's NCHWc convolutions pad channels to its vector block (12 channels compute as 16)
and its int8 convolutions run channels-last; the profile compares runtimes on the same
layers, so a conv is credited with the work the model asks for (found by matching the
executed node back to the exported graph's node), and `bytes` with the tensors the kernel
really read and wrote (what its memory traffic was).

Why the layers under-run the whole inference as the profiler saw it: the profilers time
operators, not what happens between them (ONNX Runtime's executor and its profiler's
bookkeeping; PyTorch's Python between calls, the profiler's events and the hooks' ranges).
`ProfiledRun` keeps both that whole (`whole_us`, from the same trace) and the inference
timed without the profiler (`unprofiled_us`), so the caller can say what is left out and
what profiling added. Measured here (1 thread, CIFAR ResNet18 / MobileNetV2): the layers
sum to 97% / 84% of ONNX Runtime's profiled `model_run` and 90% / 64% of PyTorch's
profiled forward, and to 100-108% / 99-100% of the unprofiled inference: the profilers'
overhead lands mostly between the operators, so the layer times are close to what the
operators cost unprofiled. On a model of microsecond kernels the per-kernel overhead (and
ONNX Runtime's whole-microsecond event durations) make the layers longer than the
unprofiled inference: read such a profile for its shares, not its absolute times.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlas.profile.layers import LayerTime

ORT_METHOD = "onnxruntime profiler"
TORCH_METHOD = "torch.profiler"
#: Inferences run before the profiled ones (the first runs allocate and prepack).
WARMUP = 3

# -- what an operator computes ------------------------------------------------------------

#: ONNX (and ONNX Runtime contrib) op types by kind of layer (`dlas.profile.layers.OPS`).
_CONV_OPS = {"Conv", "FusedConv", "NhwcFusedConv", "QLinearConv", "ConvInteger"}
_DENSE_OPS = {"Gemm", "FusedGemm", "QGemm", "MatMul", "FusedMatMul", "MatMulInteger",
              "QLinearMatMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}
_POOL_OPS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
             "QLinearAveragePool", "QLinearGlobalAveragePool", "MaxUnpool"}
_ELEMENTWISE_OPS = {
    "Relu", "Add", "Mul", "Sub", "Div", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid",
    "HardSwish", "Exp", "Log", "Sqrt", "Pow", "Neg", "Abs", "Erf", "Gelu", "FastGelu", "Min",
    "Max", "Sum", "Mean", "Cast", "Softmax", "LogSoftmax", "BatchNormalization", "Where",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearAdd",
    "QLinearMul", "QLinearLeakyRelu", "QLinearSigmoid", "QLinearSoftmax", "PRelu", "Selu",
    "Elu", "Softplus", "BiasGelu", "Affine", "Celu", "Mish", "Swish", "QuickGelu",
}
_LAYOUT_OPS = {"Reshape", "Flatten", "Transpose", "ReorderInput", "ReorderOutput", "Squeeze",
               "Unsqueeze", "Concat", "Split", "Slice", "Identity", "Pad", "Expand", "Tile",
               "Gather", "QLinearConcat", "DepthToSpace", "SpaceToDepth"}
#: Ops that compute in int8 (what "int8" means for a layer's dtype).
_INT8_OPS = {"QLinearConv", "ConvInteger", "QGemm", "MatMulInteger", "QLinearMatMul",
             "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}
#: Ops ONNX Runtime fuses into the conv before them (the fused node is named after the
#: last one's output under the NCHWc layout: `relu_nchwc`).
_FUSABLE_AFTER_CONV = {"Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid",
                       "HardSwish", "BatchNormalization", "Add", "Mul"}

#: Bytes per element of the type names ONNX Runtime's trace and numpy use.
_DTYPE = {"float": "float32", "float32": "float32", "float16": "float16", "double": "float64",
          "float64": "float64", "bfloat16": "bfloat16", "int8": "int8", "uint8": "uint8",
          "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32",
          "int64": "int64", "uint64": "uint64", "bool": "bool"}
_DTYPE_SIZE = {"float32": 4, "float16": 2, "float64": 8, "bfloat16": 2, "int8": 1,
               "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
               "uint64": 8, "bool": 1}


def onnx_op_kind(op_type: str, input_rank: int | None = None) -> str:
    """The kind of layer (`OPS`) an ONNX op type computes; a conv's depthwise-ness is
    decided by `_conv_kind` once its groups and channels are known. ReduceMean over a
    4-D tensor is the global average pool the exporters write for `AdaptiveAvgPool2d(1)`."""
    if op_type in _CONV_OPS:
        return "conv2d"
    if op_type in _DENSE_OPS:
        return "dense"
    if op_type in _POOL_OPS or (op_type == "ReduceMean" and input_rank == 4):
        return "pool"
    if op_type in _ELEMENTWISE_OPS:
        return "elementwise"
    if op_type in _LAYOUT_OPS:
        return "layout"
    return "other"


def _conv_kind(groups: int, in_channels: int | None) -> str:
    """depthwise_conv2d when every input channel is its own group, as TVM's profile says."""
    if groups > 1 and in_channels is not None and groups == in_channels:
        return "depthwise_conv2d"
    return "conv2d"


def _numel(shape: Sequence[int] | None) -> int:
    return int(math.prod(shape)) if shape is not None else 0


@dataclass
class Work:
    """What a conv or dense layer computes, in the model's terms."""

    op: str
    data_shape: list[int] | None = None
    weight_shape: list[int] | None = None
    out_shape: list[int] | None = None
    strides: list[int] | None = None
    padding: list[int] | None = None
    groups: int | None = None
    macs: int | None = None
    nnz: int | None = None
    conv_index: int | None = None

    def apply(self, layer: LayerTime) -> None:
        """Fill the layer's work fields (flops = 2 x MACs: these runtimes' kernels are
        dense, zeros are multiplied too)."""
        for name in ("data_shape", "weight_shape", "out_shape", "strides", "padding",
                     "groups", "macs", "nnz", "conv_index"):
            value = getattr(self, name)
            if value is not None:
                setattr(layer, name, value)
        layer.op = self.op
        if self.macs is not None:
            layer.flops = 2.0 * self.macs


def conv_work(data_shape: Sequence[int] | None, weight_shape: Sequence[int] | None,
              out_shape: Sequence[int] | None, *, strides: Sequence[int],
              padding: Sequence[int], groups: int, nnz: int | None = None) -> Work:
    """A convolution's work: N x Cout x OH x OW x Cin/groups x KH x KW MACs (NCHW data,
    OIHW weight; any number of spatial dims)."""
    work = Work(op=_conv_kind(groups, data_shape[1] if data_shape else None),
                data_shape=_ints(data_shape), weight_shape=_ints(weight_shape),
                out_shape=_ints(out_shape), strides=_ints(strides), padding=_ints(padding),
                groups=int(groups), nnz=nnz)
    if weight_shape is not None and out_shape is not None:
        work.macs = _numel(out_shape) * _numel(weight_shape[1:])
    return work


def dense_work(data_shape: Sequence[int] | None, weight_shape: Sequence[int] | None,
               out_shape: Sequence[int] | None, *, k: int | None,
               nnz: int | None = None) -> Work:
    """A dense layer's work: M x N x K MACs (M x N the output's elements)."""
    work = Work(op="dense", data_shape=_ints(data_shape), weight_shape=_ints(weight_shape),
                out_shape=_ints(out_shape), nnz=nnz)
    if out_shape is not None and k is not None:
        work.macs = _numel(out_shape) * int(k)
    return work


def _ints(values: Iterable[Any] | None) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def _median_ci(samples_us: Sequence[float]) -> tuple[float, list[float] | None]:
    """Median over runs and its 95% percentile-bootstrap interval, each run a round
    (`dlas.results.statistics.median_ci`: the interval every dlas time carries). Runs are
    back to back in one process, so it says how steady the layer was, not how another
    process would time it."""
    from dlas.results.statistics import median_ci

    median = float(np.median(samples_us))
    if len(samples_us) < 2:
        return median, None
    ci = median_ci({("profile", i): [float(s)] for i, s in enumerate(samples_us)})
    return median, [ci.low, ci.high]


@dataclass
class ProfiledRun:
    """A profile: the layers, and the whole inference as the same profiler timed it."""

    layers: list[LayerTime]
    #: Median over runs of the whole inference (ONNX Runtime's `model_run`, PyTorch's
    #: range around `module(x)`), microseconds, and its 95% interval.
    whole_us: float
    whole_ci_us: list[float] | None
    method: str
    runs: int
    #: Median microseconds of the same number of inferences timed without the profiler
    #: (same session or module, same threads): what profiling added to `whole_us`.
    unprofiled_us: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def layers_sum_us(self) -> float:
        return sum(layer.time_us * layer.calls for layer in self.layers)

    @property
    def coverage(self) -> float:
        """The layers' summed time over the whole inference's as the profiler saw it (1:
        nothing left out)."""
        return self.layers_sum_us / self.whole_us if self.whole_us > 0 else 0.0

    def fitted(self, latency_us: float) -> tuple[list[LayerTime], float, float]:
        """The layers and the time outside them as shares of the profiled inference,
        applied to `latency_us` (the inference timed without the profiler): (layers,
        outside_us, scale). The profiler slows what it times (by 1.6x on MobileNetV2's
        microsecond kernels at 2 threads), so its raw times do not add up to the
        unprofiled latency; their shares of the inference it saw do."""
        if self.whole_us <= 0:
            raise ValueError("the profiled inference took no time")
        scale = latency_us / self.whole_us
        layers = []
        for layer in self.layers:
            copy = layer.model_copy()
            copy.time_us = layer.time_us * scale
            copy.ci_us = None if layer.ci_us is None else [v * scale for v in layer.ci_us]
            layers.append(copy)
        outside = max(0.0, self.whole_us - self.layers_sum_us) * scale
        return layers, outside, scale

    @property
    def coverage_unprofiled(self) -> float | None:
        """The layers' summed time over the inference's without the profiler."""
        if not self.unprofiled_us:
            return None
        return self.layers_sum_us / self.unprofiled_us


def time_calls(call: Callable[[], object], runs: int) -> float:
    """Median wall-clock microseconds of `runs` calls (the caller has warmed up)."""
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return float(np.median(samples))


def _finish(layers: list[LayerTime]) -> list[LayerTime]:
    """Shares, intensities and GFLOP/s, as the TVM profile fills them."""
    total = sum(layer.time_us * layer.calls for layer in layers)
    for layer in layers:
        layer.share = layer.time_us * layer.calls / total if total > 0 else None
        if layer.flops is not None and layer.bytes:
            layer.intensity = layer.flops / layer.bytes
        if layer.flops is not None and layer.time_us > 0:
            layer.gflops = layer.flops / (layer.time_us * 1e3)
    return layers


# -- ONNX Runtime -------------------------------------------------------------------------


class OnnxGraph:
    """An ONNX graph as the profile reads it: nodes by name, weights, tensor shapes."""

    def __init__(self, model: Any, input_shape: Sequence[int] | None = None) -> None:
        import onnx
        from onnx import numpy_helper

        if input_shape is not None:
            model = _with_input_shape(model, input_shape)
            try:
                model = onnx.shape_inference.infer_shapes(model)
            except Exception:  # contrib ops: their tensors' shapes stay unknown
                pass
        graph = model.graph
        self.nodes = {node.name: node for node in graph.node if node.name}
        self.initializers = {t.name: t for t in graph.initializer}
        self._arrays: dict[str, np.ndarray] = {}
        self._to_array = numpy_helper.to_array
        self.shapes: dict[str, list[int]] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            dims = info.type.tensor_type.shape.dim
            if info.type.tensor_type.HasField("shape") and all(d.HasField("dim_value")
                                                               for d in dims):
                self.shapes[info.name] = [d.dim_value for d in dims]
        for name, tensor in self.initializers.items():
            self.shapes[name] = list(tensor.dims)
        self.producer = {out: node for node in graph.node for out in node.output}
        self.consumers: dict[str, list[Any]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        convs = [node for node in graph.node if node.op_type in _CONV_OPS]
        self.conv_index = {node.name: i for i, node in enumerate(convs)}
        self.conv_of_tensor = _conv_of_tensor(self, convs)

    def array(self, name: str) -> np.ndarray | None:
        """The constant behind a tensor: an initializer, or a DequantizeLinear of one (a QDQ
        model's weight: its int8 values, whose zeros are the weight's zeros)."""
        if name in self.initializers:
            if name not in self._arrays:
                self._arrays[name] = self._to_array(self.initializers[name])
            return self._arrays[name]
        node = self.producer.get(name)
        if node is not None and node.op_type == "DequantizeLinear" and node.input:
            return self.array(node.input[0]) if node.input[0] in self.initializers else None
        return None

    def is_constant(self, name: str) -> bool:
        node = self.producer.get(name)
        return not name or name in self.initializers or (
            node is not None and node.op_type in ("Constant", "DequantizeLinear")
            and all(self.is_constant(i) for i in node.input))


def _with_input_shape(model: Any, shape: Sequence[int]) -> Any:
    """A copy of the model whose first input has this static shape (batch 1), so shape
    inference gives every tensor the shape the profiled run had."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    initializers = {t.name for t in copy.graph.initializer}
    inputs = [i for i in copy.graph.input if i.name not in initializers]
    if inputs and len(inputs[0].type.tensor_type.shape.dim) == len(shape):
        for dim, size in zip(inputs[0].type.tensor_type.shape.dim, shape, strict=True):
            dim.Clear()
            dim.dim_value = int(size)
    return copy


def _conv_of_tensor(graph: OnnxGraph, convs: list[Any]) -> dict[str, Any]:
    """Each tensor a conv's output flows into through ops ONNX Runtime fuses into it (an
    activation, a constant scale), mapped to the conv: the NCHWc transformer names a fused
    conv after the last such tensor (`relu_nchwc`). A tensor two convs reach is dropped."""
    owner: dict[str, Any] = {}
    shared: set[str] = set()
    for conv in convs:
        tensor = conv.output[0]
        while True:
            if tensor in owner and owner[tensor] is not conv:
                shared.add(tensor)
            owner[tensor] = conv
            after = graph.consumers.get(tensor, [])
            if len(after) != 1 or after[0].op_type not in _FUSABLE_AFTER_CONV:
                break
            if not all(graph.is_constant(i) for i in after[0].input if i != tensor):
                break
            tensor = after[0].output[0]
    return {t: conv for t, conv in owner.items() if t not in shared}


def _original_node(name: str, original: OnnxGraph) -> Any | None:
    """The exported graph's node an executed node computes: the same name (fusions keep
    the conv's), the name before ONNX Runtime's `_token_N` suffixes (layout rewrites), or
    for an NCHWc node the conv whose fused output gives its name."""
    for candidate in (name, re.sub(r"(_token_\d+)+$", "", name)):
        if candidate in original.nodes:
            return original.nodes[candidate]
    if name.endswith("_nchwc"):
        return original.conv_of_tensor.get(name.removesuffix("_nchwc"))
    return None


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _weight_input(node: Any) -> str | None:
    """The weight's input of a conv or dense node (QLinear ops put it fourth)."""
    index = 3 if node.op_type in ("QLinearConv", "QGemm", "QLinearMatMul") else 1
    return node.input[index] if len(node.input) > index else None


def _onnx_padding(attrs: dict[str, Any], data_shape: Sequence[int] | None,
                  kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int]) -> list[int]:
    """(top, left, bottom, right) like TVM's ConvSpec: ONNX's pads, or what SAME_* pads."""
    spatial = len(kernel)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and data_shape is not None:
        begin, end = [], []
        for size, k, s, d in zip(data_shape[-spatial:], kernel, strides, dilations,
                                 strict=True):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        return begin + end
    pads = list(attrs.get("pads") or [0] * (2 * spatial))
    return [int(p) for p in pads]


def _nchw(shape: Sequence[int] | None, channels_last: bool) -> list[int] | None:
    """An NHWC shape as NCHW (ONNX Runtime's channels-last int8 convs)."""
    if shape is None or not channels_last or len(shape) < 3:
        return _ints(shape)
    return [int(shape[0]), int(shape[-1]), *(int(s) for s in shape[1:-1])]


def onnx_node_work(node: Any, graph: OnnxGraph, *, data_shape: Sequence[int] | None = None,
                   out_shape: Sequence[int] | None = None) -> Work | None:
    """A conv or dense node's work from its attributes, weight and tensor shapes (the
    graph's inferred shapes unless given)."""
    kind = onnx_op_kind(node.op_type)
    if kind not in ("conv2d", "dense"):
        return None
    attrs = _attrs(node)
    data_shape = data_shape or graph.shapes.get(node.input[0])
    out_shape = out_shape or graph.shapes.get(node.output[0])
    weight_name = _weight_input(node)
    weight = graph.array(weight_name) if weight_name else None
    weight_shape = list(weight.shape) if weight is not None else (
        graph.shapes.get(weight_name) if weight_name else None)
    nnz = int(np.count_nonzero(weight)) if weight is not None else None
    if kind == "dense":
        return _onnx_dense(attrs, data_shape, weight_shape, out_shape, nnz)
    channels_last = bool(attrs.get("channels_last", 0))
    data_shape, out_shape = _nchw(data_shape, channels_last), _nchw(out_shape, channels_last)
    kernel = list(attrs.get("kernel_shape") or (weight_shape or [0, 0, 1, 1])[2:])
    strides = list(attrs.get("strides") or [1] * len(kernel))
    dilations = list(attrs.get("dilations") or [1] * len(kernel))
    work = conv_work(data_shape, weight_shape, out_shape, strides=strides,
                     padding=_onnx_padding(attrs, data_shape, kernel, strides, dilations),
                     groups=int(attrs.get("group", 1)), nnz=nnz)
    work.conv_index = graph.conv_index.get(node.name)
    return work


def _onnx_dense(attrs: dict[str, Any], data_shape: Sequence[int] | None,
                weight_shape: Sequence[int] | None, out_shape: Sequence[int] | None,
                nnz: int | None) -> Work:
    """Gemm (transA/transB) or MatMul ([..., M, K] x [..., K, N]): K from the data."""
    k = None
    if data_shape:
        k = data_shape[-2] if attrs.get("transA", 0) else data_shape[-1]
    elif weight_shape:
        k = weight_shape[-1] if attrs.get("transB", 0) else weight_shape[-2]
    return dense_work(data_shape, weight_shape, out_shape, k=k, nnz=nnz)


def _trace_tensors(args: dict[str, Any], key: str) -> list[tuple[str, list[int]]]:
    """(dtype, shape) of each tensor an event lists under input_type_shape or
    output_type_shape."""
    tensors = []
    for entry in args.get(key) or []:
        for dtype, shape in entry.items():
            tensors.append((_DTYPE.get(dtype, dtype), [int(d) for d in shape]))
    return tensors


def _tensor_bytes(tensors: Iterable[tuple[str, Sequence[int]]]) -> int:
    return sum(_numel(shape) * _DTYPE_SIZE.get(dtype, 4) for dtype, shape in tensors)


def _node_bytes(args: dict[str, Any], node: Any | None, optimized: OnnxGraph | None) -> int:
    """Every tensor the kernel read and wrote: the event's own list, plus the weights it
    leaves out (ONNX Runtime prepacks a Gemm's or QLinearConv's weight and then does not
    list it), taken from the optimised graph's initializers."""
    inputs = _trace_tensors(args, "input_type_shape")
    total = _tensor_bytes(inputs) + _tensor_bytes(_trace_tensors(args, "output_type_shape"))
    if node is None or optimized is None:
        return total
    listed = Counter(tuple(shape) for _, shape in inputs)
    for name in node.input:
        if name not in optimized.initializers:
            continue
        shape = tuple(optimized.shapes[name])
        if listed[shape] > 0:
            listed[shape] -= 1
        else:
            array = optimized.array(name)
            total += int(array.nbytes) if array is not None else 0
    return total


@dataclass
class _NodeRuns:
    """One executed node across the profiled runs."""

    name: str
    args: dict[str, Any]
    per_run_us: dict[int, float] = field(default_factory=dict)
    per_run_calls: dict[int, int] = field(default_factory=dict)


def _ort_node_runs(events: list[dict[str, Any]], warmup: int
                   ) -> tuple[list[_NodeRuns], list[float]]:
    """The kernel-time events grouped by node, in execution order, and the `model_run`
    durations (us), warm-up runs left out. Events belong to the run whose window holds
    them."""
    runs = sorted((e for e in events if e.get("cat") == "Session"
                   and e.get("name") == "model_run"), key=lambda e: e["ts"])
    starts = [e["ts"] for e in runs]
    nodes: dict[str, _NodeRuns] = {}
    kernel_events = sorted((e for e in events if e.get("cat") == "Node"
                            and str(e.get("name", "")).endswith("_kernel_time")),
                           key=lambda e: e["ts"])
    for event in kernel_events:
        run = bisect_right(starts, event["ts"]) - 1
        if run < warmup or event["ts"] > runs[run]["ts"] + runs[run]["dur"]:
            continue
        name = event["name"].removesuffix("_kernel_time")
        node = nodes.setdefault(name, _NodeRuns(name, event.get("args", {})))
        node.per_run_us[run] = node.per_run_us.get(run, 0.0) + float(event["dur"])
        node.per_run_calls[run] = node.per_run_calls.get(run, 0) + 1
    return list(nodes.values()), [float(e["dur"]) for e in runs[warmup:]]


def _ort_layer(index: int, node_runs: _NodeRuns, optimized: OnnxGraph | None,
               original: OnnxGraph) -> LayerTime:
    """One executed node's layer record: its time over runs, what it computes (the
    exported graph's node where it can be found, else the kernel's own shapes)."""
    samples = list(node_runs.per_run_us.values())
    calls = max(1, round(float(np.median(list(node_runs.per_run_calls.values())))))
    median, ci = _median_ci([s / calls for s in samples])
    args = node_runs.args
    op_type = str(args.get("op_name", ""))
    inputs = _trace_tensors(args, "input_type_shape")
    outputs = _trace_tensors(args, "output_type_shape")
    node = optimized.nodes.get(node_runs.name) if optimized is not None else None
    layer = LayerTime(index=index, name=node_runs.name,
                      op=onnx_op_kind(op_type, len(inputs[0][1]) if inputs else None),
                      time_us=median, ci_us=ci, calls=calls,
                      data_shape=inputs[0][1] if inputs else None,
                      out_shape=outputs[0][1] if outputs else None,
                      dtype="int8" if op_type in _INT8_OPS else (
                          inputs[0][0] if inputs else None),
                      bytes=_node_bytes(args, node, optimized))
    work = _ort_work(node_runs.name, layer.op, node, inputs, outputs, optimized, original)
    if work is not None:
        work.apply(layer)
    return layer


def _ort_work(name: str, kind: str, node: Any | None, inputs: list[tuple[str, list[int]]],
              outputs: list[tuple[str, list[int]]], optimized: OnnxGraph | None,
              original: OnnxGraph) -> Work | None:
    """A conv's or dense node's work: the exported node's when the executed node maps to
    one of the same kind (the model's shapes), else the executed node's (the kernel's
    shapes, e.g. NCHWc-padded channels)."""
    if kind not in ("conv2d", "dense"):
        return None
    source = _original_node(name, original)
    if source is not None and onnx_op_kind(source.op_type) == kind:
        work = onnx_node_work(source, original)
        if work is not None and work.macs is not None:
            return work
    if node is None or optimized is None:
        return None
    return onnx_node_work(node, optimized, data_shape=inputs[0][1] if inputs else None,
                          out_shape=outputs[0][1] if outputs else None)


def _ort_options(threads: int, graph_optimization: str, work_dir: Path) -> Any:
    """OrtPeer's session settings, plus profiling and the optimised model's file."""
    import onnxruntime as ort

    from dlas.compression.int8 import GRAPH_OPTIMIZATION

    if graph_optimization not in GRAPH_OPTIMIZATION:
        raise ValueError(f"unknown graph_optimization {graph_optimization!r}; known: "
                         f"{', '.join(GRAPH_OPTIMIZATION)}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                               GRAPH_OPTIMIZATION[graph_optimization])
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = str(work_dir / "ort_profile")
    options.optimized_model_filepath = str(work_dir / "optimized.onnx")
    return options


def _model_bytes(model: bytes | str | Path) -> bytes:
    return model if isinstance(model, bytes) else Path(model).read_bytes()


def _run_profiled(session: Any, x: np.ndarray, runs: int,
                  warmup: int) -> tuple[list[dict], float]:
    """`warmup + runs` inferences through an IO binding (as `OrtPeer.bind` times them):
    the trace's events (the trace file is removed), then, profiling ended, `runs` more
    timed without the profiler (median us)."""
    binding = session.io_binding()
    binding.bind_cpu_input(session.get_inputs()[0].name,
                           np.ascontiguousarray(x, dtype=np.float32))
    binding.bind_output(session.get_outputs()[0].name)
    for _ in range(warmup + runs):
        session.run_with_iobinding(binding)
    trace = Path(session.end_profiling())
    try:
        events = json.loads(trace.read_text())
    finally:
        trace.unlink(missing_ok=True)
    return events, time_calls(lambda: session.run_with_iobinding(binding), runs)


def ort_profile_run(onnx_bytes_or_path: bytes | str | Path, x: np.ndarray, *, threads: int,
                    runs: int, graph_optimization: str = "all",
                    session_options_hook: Callable[[Any], None] | None = None,
                    warmup: int = WARMUP) -> ProfiledRun:
    """Profile the model in ONNX Runtime: one layer per executed node, in execution order,
    with the whole inference's time from the same trace (see the module doc).

    `x` is one sample batch (its first sample is used); `session_options_hook` may change
    the `SessionOptions` before the session is made (thread affinities)."""
    import onnx
    import onnxruntime as ort

    if runs < 1:
        raise ValueError("runs must be >= 1")
    data = _model_bytes(onnx_bytes_or_path)
    x = np.ascontiguousarray(x[:1], dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="dlas-ort-profile-") as tmp:
        options = _ort_options(threads, graph_optimization, Path(tmp))
        if session_options_hook is not None:
            session_options_hook(options)
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        events, unprofiled = _run_profiled(session, x, runs, warmup)
        saved = Path(tmp) / "optimized.onnx"
        optimized = OnnxGraph(onnx.load(str(saved))) if saved.exists() else None
        del session
    original = OnnxGraph(onnx.load_from_string(data), x.shape)
    node_runs, whole = _ort_node_runs(events, warmup)
    if not whole or not node_runs:
        raise RuntimeError("ONNX Runtime's trace holds no profiled run")
    layers = [_ort_layer(i, n, optimized, original) for i, n in enumerate(node_runs)]
    whole_us, whole_ci = _median_ci(whole)
    notes = [] if optimized is not None else [
        "ONNX Runtime saved no optimised model: conv and dense work from the kernels' shapes"]
    return ProfiledRun(_finish(layers), whole_us, whole_ci, ORT_METHOD, len(whole),
                       unprofiled, notes)


# -- PyTorch ------------------------------------------------------------------------------

_RUN_TAG = "dlas.run::"
_MODULE_TAG = "dlas.module::"

#: Words of an aten op's name that say what it computes (ops called outside a module).
_ATEN_WORDS = (
    ("conv2d", ("conv",)),
    ("dense", ("linear", "addmm", "matmul", "::mm", "bmm")),
    ("pool", ("pool", "::mean")),
    ("layout", ("view", "reshape", "flatten", "permute", "transpose", "contiguous", "cat",
                "squeeze", "unsqueeze", "slice", "select", "split", "chunk", "stack",
                "expand", "pad")),
    ("elementwise", ("relu", "add", "mul", "sub", "div", "clamp", "hardtanh", "sigmoid",
                     "tanh", "silu", "gelu", "hardswish", "exp", "sqrt", "softmax",
                     "batch_norm", "dropout", "neg", "abs", "pow", "where", "maximum",
                     "minimum", "_to_copy", "::to")),
)
_TORCH_DTYPE = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
                "double": "float64", "signed char": "int8", "unsigned char": "uint8",
                "int": "int32", "long int": "int64", "bool": "bool", "short int": "int16"}


def aten_op_kind(name: str) -> str:
    """The kind of layer an aten op computes, from its name."""
    for kind, words in _ATEN_WORDS:
        if any(word in name for word in words):
            return kind
    return "other"


def torch_module_kind(module: Any) -> str:
    """The kind of layer a leaf module computes (convs' depthwise-ness decided later)."""
    from torch import nn

    if isinstance(module, nn.Conv2d | nn.Conv1d | nn.Conv3d):
        return "conv2d"
    if isinstance(module, nn.Linear | nn.Bilinear):
        return "dense"
    if isinstance(module, nn.modules.pooling._MaxPoolNd | nn.modules.pooling._AvgPoolNd
                  | nn.modules.pooling._AdaptiveAvgPoolNd
                  | nn.modules.pooling._AdaptiveMaxPoolNd):
        return "pool"
    if isinstance(module, nn.Flatten | nn.Unflatten | nn.Identity | nn.PixelShuffle):
        return "layout"
    if type(module).__module__.removeprefix("torch.nn.modules.") in (
            "activation", "batchnorm", "dropout", "normalization"):
        return "elementwise"
    return "other"


@dataclass
class _ModuleCall:
    """A leaf module's call as a warm-up forward saw it."""

    name: str
    module: Any
    inputs: list[Any]
    outputs: list[Any]


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _leaf_modules(module: Any) -> list[tuple[str, Any]]:
    return [(name or type(module).__name__, m) for name, m in module.named_modules()
            if next(m.children(), None) is None]


def _capture_calls(module: Any, leaves: list[tuple[str, Any]], x: Any) -> list[_ModuleCall]:
    """One forward with hooks recording each leaf call's input and output tensors (their
    shapes and dtypes: the profiler records inputs only, and not which module ran)."""
    calls: list[_ModuleCall] = []

    def hook(name: str) -> Callable[..., None]:
        def record(mod: Any, args: Any, out: Any) -> None:
            calls.append(_ModuleCall(name, mod, _tensors(args), _tensors(out)))
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in leaves]
    try:
        module(x)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _profile_forwards(module: Any, leaves: list[tuple[str, Any]], x: Any, runs: int) -> Any:
    """`runs` forwards under torch.profiler, each in a `dlas.run::i` range and every leaf
    module call in a `dlas.module::name` range (forward pre/post hooks)."""
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile

    open_ranges: list[Any] = []

    def enter(name: str) -> Callable[..., None]:
        def pre(mod: Any, args: Any) -> None:
            scope = record_function(_MODULE_TAG + name)
            scope.__enter__()
            open_ranges.append(scope)
        return pre

    def leave(mod: Any, args: Any, out: Any) -> None:
        open_ranges.pop().__exit__(None, None, None)

    handles = [h for name, m in leaves for h in (m.register_forward_pre_hook(enter(name)),
                                                  m.register_forward_hook(leave))]
    try:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for i in range(runs):
                with record_function(f"{_RUN_TAG}{i}"):
                    module(x)
    finally:
        for handle in handles:
            handle.remove()
    return prof.events()


def _run_slots(events: Any) -> tuple[list[list[Any]], list[float]]:
    """Per profiled forward, its direct sub-events in order (module ranges, and aten ops
    called outside any leaf module: a functional relu, a residual add, a flatten), and
    the forward's own time (us)."""
    forwards = sorted((e for e in events if e.name.startswith(_RUN_TAG)
                       and e.cpu_parent is None), key=lambda e: e.time_range.start)
    slots = [sorted(f.cpu_children, key=lambda e: e.time_range.start) for f in forwards]
    return slots, [float(f.cpu_time_total) for f in forwards]


def _slot_time(event: Any) -> float:
    """A module range's time is its top-level ops' (self + children) CPU time, what the
    layer computed without the hooks' and `Module.__call__`'s Python; an op's its own."""
    if event.name.startswith(_MODULE_TAG):
        return float(sum(c.cpu_time_total for c in event.cpu_children))
    return float(event.cpu_time_total)


def _module_layer(index: int, call: _ModuleCall, conv_index: int | None) -> LayerTime:
    """What a leaf module computed, from the module and the tensors of its call."""
    module = call.module
    kind = torch_module_kind(module)
    data = call.inputs[0] if call.inputs else None
    out = call.outputs[0] if call.outputs else None
    params = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    nbytes = sum(t.numel() * t.element_size() for t in [*call.inputs, *call.outputs, *params])
    layer = LayerTime(index=index, name=call.name, op=kind, time_us=0.0, bytes=nbytes,
                      data_shape=list(data.shape) if data is not None else None,
                      out_shape=list(out.shape) if out is not None else None,
                      dtype=str(data.dtype).removeprefix("torch.") if data is not None
                      else None)
    work = _torch_work(module, kind, layer.data_shape, layer.out_shape)
    if work is not None:
        work.conv_index = conv_index if work.op != "dense" else None
        work.apply(layer)
    return layer


def _torch_work(module: Any, kind: str, data_shape: list[int] | None,
                out_shape: list[int] | None) -> Work | None:
    import torch

    if kind not in ("conv2d", "dense") or not isinstance(getattr(module, "weight", None),
                                                         torch.Tensor):
        return None
    weight = module.weight
    nnz = int(torch.count_nonzero(weight))
    if kind == "dense":
        return dense_work(data_shape, list(weight.shape), out_shape,
                          k=int(weight.shape[-1]), nnz=nnz)
    return conv_work(data_shape, list(weight.shape), out_shape, strides=list(module.stride),
                     padding=_torch_padding(module, data_shape, out_shape),
                     groups=int(module.groups), nnz=nnz)


def _torch_padding(module: Any, data_shape: list[int] | None,
                   out_shape: list[int] | None) -> list[int]:
    """(top, left, bottom, right); 'same' / 'valid' resolved as PyTorch pads them (the
    extra row and column at the end)."""
    spatial = len(module.kernel_size)
    if isinstance(module.padding, str):
        if module.padding == "valid" or data_shape is None:
            return [0] * (2 * spatial)
        totals = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size,
                                              strict=True)]
        return [t // 2 for t in totals] + [t - t // 2 for t in totals]
    return [int(p) for p in module.padding] * 2


def _op_layer(index: int, event: Any) -> LayerTime:
    """An aten op called outside any leaf module: what the profiler recorded of it (input
    shapes and dtypes; the output's shape only where it is the inputs' broadcast)."""
    shapes = [list(s) for s in (event.input_shapes or [])]
    dtypes = [_TORCH_DTYPE.get(d, d) for d in (getattr(event, "input_dtypes", None) or [])]
    tensors = [(d, s) for s, d in zip(shapes, dtypes, strict=False) if s]
    kind = aten_op_kind(event.name)
    layer = LayerTime(index=index, name=event.name, op=kind, time_us=0.0,
                      data_shape=tensors[0][1] if tensors else None,
                      dtype=tensors[0][0] if tensors else None)
    if kind == "elementwise" and tensors:
        out = list(np.broadcast_shapes(*(tuple(s) for _, s in tensors)))
        layer.out_shape = out
        layer.bytes = _tensor_bytes([*tensors, (tensors[0][0], out)])
    return layer


def _slot_names(slots: list[Any]) -> list[str]:
    return [e.name for e in slots]


def torch_profile_run(module: Any, x: np.ndarray, *, threads: int, runs: int,
                      warmup: int = WARMUP) -> ProfiledRun:
    """Profile the module in PyTorch eager: one layer per leaf-module call and per aten op
    called outside a leaf module, in execution order (see the module doc).

    Why leaf-module ranges rather than the profiler's aten ops alone: a module keeps what
    the op's recorded shapes cannot tell (a conv's padding, groups, its weight's zeros),
    and module ranges group the op with the small ops it calls. A layer's time is the
    self + children CPU time of the aten ops its module called (e.g. `aten::conv2d`), not
    the range's: the range adds the hooks' and `Module.__call__`'s Python, which made the
    layers of MobileNetV2 sum to 1.2x its unprofiled forward where the ops' times sum to
    1.0x. Ops called outside any leaf module (a functional relu, a residual add, a
    flatten) are layers of their own, named by the op."""
    import torch

    if runs < 1:
        raise ValueError("runs must be >= 1")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        first = next(module.parameters(), None)
        dtype = first.dtype if first is not None else torch.float32
        tensor = torch.from_numpy(np.ascontiguousarray(x[:1], dtype=np.float32)).to(dtype)
        leaves = _leaf_modules(module)
        with torch.inference_mode():
            calls = _capture_calls(module, leaves, tensor)
            for _ in range(max(warmup - 1, 0)):
                module(tensor)
            unprofiled = time_calls(lambda: module(tensor), runs)
            events = _profile_forwards(module, leaves, tensor, runs)
    finally:
        torch.set_num_threads(previous)
    slots, whole = _run_slots(events)
    run = _torch_profile(slots, whole, calls)
    run.unprofiled_us = unprofiled
    return run


def _torch_profile(slots: list[list[Any]], whole: list[float],
                   calls: list[_ModuleCall]) -> ProfiledRun:
    """Align the forwards' slots with each other and with the warm-up's module calls."""
    if not slots or any(_slot_names(s) != _slot_names(slots[0]) for s in slots):
        raise RuntimeError("the profiled forwards ran different operators (data-dependent "
                           "control flow?): no per-layer profile")
    modules = iter(calls)
    layers: list[LayerTime] = []
    convs = 0
    for position, event in enumerate(slots[0]):
        times = [_slot_time(run[position]) for run in slots]
        if event.name.startswith(_MODULE_TAG):
            call = next(modules, None)
            if call is None or event.name != _MODULE_TAG + call.name:
                raise RuntimeError(f"module call {event.name} does not match the warm-up's")
            if not event.cpu_children:  # ran no operator (Identity, Dropout in eval)
                continue
            layer = _module_layer(len(layers), call, convs)
            convs += layer.op in ("conv2d", "depthwise_conv2d")
        else:
            layer = _op_layer(len(layers), event)
        layer.time_us, layer.ci_us = _median_ci(times)
        layers.append(layer)
    whole_us, whole_ci = _median_ci(whole)
    return ProfiledRun(_finish(layers), whole_us, whole_ci, TORCH_METHOD, len(whole))


# -- baselines ----------------------------------------------------------------------------


def peer_onnx(peer: Any) -> bytes | str:
    """The ONNX model an OrtPeer runs. The peer does not keep it, but its session does:
    onnxruntime's `InferenceSession` holds the bytes (or path) it was built from, to
    rebuild itself on a provider fallback."""
    session = peer.session
    data = getattr(session, "_model_bytes", None) or getattr(session, "_model_path", None)
    if not data:
        raise RuntimeError(f"{type(peer).__name__}'s session does not hold its ONNX model")
    return data


def _affinity_hook(cpus: list[int] | None, threads: int) -> Callable[[Any], None] | None:
    """Pin the profiling session's pool threads as OrtPeer pins its own."""
    if not cpus or len(cpus) != threads or threads <= 1:
        return None

    def hook(options: Any) -> None:
        options.add_session_config_entry("session.intra_op_thread_affinities",
                                         ";".join(str(c + 1) for c in cpus[1:]))
    return hook


def profile_peer(peer: Any, x: np.ndarray, *, threads: int, runs: int) -> ProfiledRun:
    """The per-operator profile of a baseline peer, by its runtime's profiler."""
    from dlas.tuning.baselines.ort import OrtPeer
    from dlas.tuning.baselines.torch_eager import TorchPeer

    if isinstance(peer, OrtPeer):
        return ort_profile_run(peer_onnx(peer), x, threads=threads, runs=runs,
                               graph_optimization=peer.graph_optimization,
                               session_options_hook=_affinity_hook(peer.cpus, threads))
    if isinstance(peer, TorchPeer):
        return torch_profile_run(peer.module, x, threads=threads, runs=runs)
    raise NotImplementedError(f"no operator profiler for baseline peer "
                              f"{type(peer).__name__} (runtime {peer.runtime!r}); known: "
                              "OrtPeer (onnxruntime), TorchPeer (pytorch)")
