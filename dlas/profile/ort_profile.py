"""ONNX Runtime's per-operator profile of a model, from its own profiler.

A baseline's kernels cannot be called on their own (TVM's are: `dlas.profile.tvm_kernels`),
so ONNX Runtime's profiler times them inside whole inferences: a second session of the
same model with the same settings as `OrtPeer` (intra-op threads, one inter-op thread,
sequential, the same graph optimisation level, pinned the same way) and
`enable_profiling`. Its trace has one `<node>_kernel_time` event per executed node and
run (the kernel alone, not the executor around it) and one `model_run` event per run (the
whole inference the profiler saw).

Each executed node is matched back to the exported graph's node (`OnnxGraph`: the same
name, the name before ONNX Runtime's suffixes, or the conv an NCHWc node fused), so a
conv or dense layer is credited with the model's work, not the kernel's
(`dlas.profile.work` says why).
"""

from __future__ import annotations

import json
import re
import tempfile
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlas.profile.profiled_run import (
    WARMUP,
    ProfiledRun,
    finish_layers,
    median_over_runs,
    time_calls,
)
from dlas.profile.work import Work, conv_work, dense_work, ints, tensor_bytes
from dlas.results.layer_profile import LayerTime

ORT_METHOD = "onnxruntime profiler"

#: ONNX (and ONNX Runtime contrib) op types by kind of layer (`dlas.results.layer_profile.OPS`).
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

#: numpy's names of the type names ONNX Runtime's trace uses.
_DTYPE = {"float": "float32", "float32": "float32", "float16": "float16", "double": "float64",
          "float64": "float64", "bfloat16": "bfloat16", "int8": "int8", "uint8": "uint8",
          "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32",
          "int64": "int64", "uint64": "uint64", "bool": "bool"}


def onnx_op_kind(op_type: str, input_rank: int | None = None) -> str:
    """The kind of layer (`OPS`) an ONNX op type computes; a conv's depthwise-ness is
    decided by `conv_work` once its groups and channels are known. ReduceMean over a
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
        return ints(shape)
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


def _node_bytes(args: dict[str, Any], node: Any | None, optimized: OnnxGraph | None) -> int:
    """Every tensor the kernel read and wrote: the event's own list, plus the weights it
    leaves out (ONNX Runtime prepacks a Gemm's or QLinearConv's weight and then does not
    list it), taken from the optimised graph's initializers."""
    inputs = _trace_tensors(args, "input_type_shape")
    total = tensor_bytes(inputs) + tensor_bytes(_trace_tensors(args, "output_type_shape"))
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
    median, ci = median_over_runs([s / calls for s in samples])
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
    whole_us, whole_ci = median_over_runs(whole)
    notes = [] if optimized is not None else [
        "ONNX Runtime saved no optimised model: conv and dense work from the kernels' shapes"]
    return ProfiledRun(finish_layers(layers), whole_us, whole_ci, ORT_METHOD, len(whole),
                       unprofiled, notes)

