"""PyTorch's per-operator profile of a module, from `torch.profiler`.

A baseline's kernels cannot be called on their own (TVM's are: `dlas.profile.tvm_kernels`),
so `torch.profiler` times them inside eager forwards, with every leaf module's call
wrapped in a `record_function` range by forward hooks, so each layer keeps its
`nn.Module` (a conv's stride, padding, groups and weight) rather than being an anonymous
`aten::conv2d` (`torch_profile_run` says why, and what a layer's time is).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlas.profile.profiled_run import (
    WARMUP,
    ProfiledRun,
    finish_layers,
    median_over_runs,
    time_calls,
)
from dlas.profile.work import Work, conv_work, dense_work, tensor_bytes
from dlas.results.layer_profile import LayerTime

TORCH_METHOD = "torch.profiler"

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
        layer.bytes = tensor_bytes([*tensors, (tensors[0][0], out)])
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
        layer.time_us, layer.ci_us = median_over_runs(times)
        layers.append(layer)
    whole_us, whole_ci = median_over_runs(whole)
    return ProfiledRun(finish_layers(layers), whole_us, whole_ci, TORCH_METHOD, len(whole))
