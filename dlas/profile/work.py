"""What an operator computes, in the model's terms: a conv's or dense layer's work
(MACs, shapes, stride, padding, groups, its weight's non-zeros) and the bytes of the
tensors a kernel read and wrote. Both baselines' profilers (`dlas.profile.ort_profile`,
`dlas.profile.torch_profile`) fill their layers with it, so their figures mean the same.

Why the work figures (`macs`, shapes, `nnz`) are the model's and not the kernel's: ONNX
Runtime's NCHWc convolutions pad channels to its vector block (12 channels compute as 16)
and its int8 convolutions run channels-last; the profile compares runtimes on the same
layers, so a conv is credited with the work the model asks for (found by matching the
executed node back to the exported graph's node), and `bytes` with the tensors the kernel
really read and wrote (what its memory traffic was).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dlas.results.layer_profile import LayerTime

#: Bytes per element, by numpy's type names.
_DTYPE_SIZE = {"float32": 4, "float16": 2, "float64": 8, "bfloat16": 2, "int8": 1,
               "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
               "uint64": 8, "bool": 1}


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
                data_shape=ints(data_shape), weight_shape=ints(weight_shape),
                out_shape=ints(out_shape), strides=ints(strides), padding=ints(padding),
                groups=int(groups), nnz=nnz)
    if weight_shape is not None and out_shape is not None:
        work.macs = _numel(out_shape) * _numel(weight_shape[1:])
    return work


def dense_work(data_shape: Sequence[int] | None, weight_shape: Sequence[int] | None,
               out_shape: Sequence[int] | None, *, k: int | None,
               nnz: int | None = None) -> Work:
    """A dense layer's work: M x N x K MACs (M x N the output's elements)."""
    work = Work(op="dense", data_shape=ints(data_shape), weight_shape=ints(weight_shape),
                out_shape=ints(out_shape), nnz=nnz)
    if out_shape is not None and k is not None:
        work.macs = _numel(out_shape) * int(k)
    return work


def ints(values: Iterable[Any] | None) -> list[int] | None:
    """A list of plain ints (None kept): a work's fields are that whatever sequence or
    integer type a runtime gave."""
    return None if values is None else [int(v) for v in values]


def tensor_bytes(tensors: Iterable[tuple[str, Sequence[int]]]) -> int:
    """Bytes of (dtype, shape) tensors, dtypes by numpy's names (an unknown one counted as
    float32)."""
    return sum(_numel(shape) * _DTYPE_SIZE.get(dtype, 4) for dtype, shape in tensors)
