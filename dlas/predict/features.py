"""What the latency predictor sees of a layer and of a point.

Following Li, Paolieri and Golubchik (ICPE 2023), end-to-end latency is predicted as the
sum of per-operation predictions plus an overhead term. The operations predicted one by
one are the convolutions and dense layers (nearly all of a CNN's time); everything else a
point runs (pools, elementwise kernels a sparse algorithm leaves unfused, the runtime's
dispatch) is the point's `rest`, predicted from point-level features.

Why features are computed from shapes here and not taken from the profile's measured
bytes: a sweep that was never run has no profile, only its model's layer shapes (read
with forward hooks on the model, `dlas.predict.sweep`). Training and prediction must see
the same quantities, so both compute work and bytes with the same functions
(`conv_layer`, `dense_layer`) from the same shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Operations predicted one by one; the rest is the point's `rest` term.
PREDICTED_OPS = ("conv2d", "depthwise_conv2d", "dense")
DTYPES = ("float32", "float16", "int8")
ALGORITHM_FAMILIES = ("direct", "gemm", "spatial_pack")
SCHEDULES = ("minimal", "searched", "transferred")


@dataclass(frozen=True)
class PointContext:
    """What a point's layers share: how they were compiled and run."""

    #: The sweep's algorithm option (e.g. "direct_csr"), or the baseline runtime.
    algorithm: str
    dtype: str = "float32"
    threads: int = 1
    #: "minimal" untuned; "searched"/"transferred" for tuned points.
    schedule: str = "minimal"
    target: str = "host"

    @property
    def family(self) -> str:
        return self.algorithm.removesuffix("_csr")

    @property
    def sparse(self) -> bool:
        return self.algorithm.endswith("_csr")


@dataclass(frozen=True)
class LayerFeatures:
    """One conv or dense layer as the predictor sees it."""

    op: str
    in_channels: int
    out_channels: int
    kernel: int
    stride: int
    groups: int
    out_h: int
    out_w: int
    #: Multiply-accumulates of the dense layer, and the share of its weights not zero.
    macs: float
    density: float
    context: PointContext
    #: Where it is in the model (conv index), for reports; not a feature.
    index: int | None = None

    @property
    def sparse(self) -> bool:
        """Computed in CSR: the point's algorithm is sparse (it lowers convs only)."""
        return self.context.sparse and self.op != "dense"

    @property
    def effective_macs(self) -> float:
        """What the kernel computes: all MACs (dense algorithm) or the non-zeros' (CSR)."""
        return self.macs * self.density if self.sparse else self.macs

    @property
    def itemsize(self) -> int:
        return {"int8": 1, "float16": 2}.get(self.context.dtype, 4)

    @property
    def bytes(self) -> float:
        """Minimum bytes: input and output activations once, the weights once (CSR: the
        non-zeros' values and column indices)."""
        cin_per_group = self.in_channels // max(self.groups, 1)
        weights = self.out_channels * cin_per_group * self.kernel * self.kernel
        weight_bytes = (weights * self.density * (self.itemsize + 4) if self.sparse
                        else weights * self.itemsize)
        in_hw = self.out_h * self.stride * self.out_w * self.stride
        activations = (self.in_channels * in_hw + self.out_channels * self.out_h * self.out_w)
        return activations * self.itemsize + weight_bytes

    def numeric(self) -> list[float]:
        """The numeric features (logs of the quantities spanning decades)."""
        return [math.log1p(self.effective_macs), math.log1p(self.macs), math.log1p(self.bytes),
                float(self.in_channels), float(self.out_channels), float(self.kernel),
                float(self.stride), float(self.out_h * self.out_w), self.density,
                float(self.groups > 1), float(self.context.threads)]

    def vector(self) -> list[float]:
        """Numeric features, then one-hot op, dtype, algorithm family, sparsity, schedule."""
        c = self.context
        return (self.numeric()
                + [float(self.op == o) for o in PREDICTED_OPS]
                + [float(c.dtype == d) for d in DTYPES]
                + [float(c.family == a) for a in ALGORITHM_FAMILIES]
                + [float(self.sparse)]
                + [float(c.schedule == s) for s in SCHEDULES])


NUMERIC_NAMES = ("log effective MACs", "log MACs", "log bytes", "in channels",
                 "out channels", "kernel", "stride", "output pixels", "density", "grouped",
                 "threads")


@dataclass
class PointFeatures:
    """A point as the predictor sees it: its layers and what the rest term needs."""

    label: str
    #: The model it belongs to (what leave-one-model-out holds out together).
    model: str
    context: PointContext
    layers: list[LayerFeatures]
    #: Output elements of all its convs (what pools and elementwise kernels touch).
    activation_elements: float = 0.0
    #: Measured (training) figures: end-to-end latency and each layer's time, us.
    latency_us: float | None = None
    layer_us: list[float] = field(default_factory=list)

    @property
    def convs(self) -> int:
        return sum(layer.op != "dense" for layer in self.layers)

    def rest_vector(self) -> list[float]:
        """Features of the rest term: its cost per conv (the runtime's dispatch of the
        conv's kernel and of the small kernels beside it). Measured on the predictor's
        sweep (benchmarks/predictor.py, Zen 5): adding a per-activation-element term and
        a constant fitted ResNet and VGG and overshot the MobileNets' rest 2-4x when they
        were held out (MAPE 13.8% vs 10.0% with the per-conv term alone)."""
        return [float(self.convs)]

    @property
    def rest_group(self) -> tuple[bool, str]:
        """Points whose rest behaves alike: a sparse algorithm leaves epilogues unfused."""
        return self.context.sparse, self.context.dtype

    @property
    def measured_rest_us(self) -> float | None:
        if self.latency_us is None or not self.layer_us:
            return None
        return self.latency_us - sum(self.layer_us)


def conv_layer(*, in_channels: int, out_channels: int, kernel: int, stride: int,
               groups: int, out_h: int, out_w: int, density: float, context: PointContext,
               index: int | None = None) -> LayerFeatures:
    macs = float(out_channels * out_h * out_w * (in_channels // max(groups, 1)) * kernel * kernel)
    op = "depthwise_conv2d" if groups > 1 and groups == in_channels else "conv2d"
    return LayerFeatures(op, in_channels, out_channels, kernel, stride, groups, out_h, out_w,
                         macs, density, context, index)


def dense_layer(*, in_features: int, out_features: int, density: float,
                context: PointContext, index: int | None = None) -> LayerFeatures:
    return LayerFeatures("dense", in_features, out_features, 1, 1, 1, 1, 1,
                         float(in_features * out_features), density, context, index)
