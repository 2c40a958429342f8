"""Percent of expected speedup per layer: for a pruned point, each conv beside the same
conv of its dense reference, so that where the paper's per-model analysis says *how far*
from the ideal a pruned model is, the report says *which layers* lose it (`pair_speedups`
says how points are paired).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dlas.report.data import NCHW, algorithm_family
from dlas.report.profile_data import ModelKey, ProfiledPoint
from dlas.report.render import Cell, Table
from dlas.results.layer_profile import LayerTime, PointProfile

#: Density below this makes a layer pruned (float noise in nnz / weights aside).
PRUNED_BELOW = 0.999


# -- 3. per-layer percent of expected speedup -----------------------------------------------


def weight_count(layer: LayerTime) -> int | None:
    """The weights a layer's weight shape holds (grouped convs: O x I/groups x KH x KW)."""
    return math.prod(layer.weight_shape) if layer.weight_shape else None


def layer_shape(layer: LayerTime) -> str:
    """'Cin->Cout KxK s2 g32 @HxW' for a conv; the output shape otherwise."""
    w, data = layer.weight_shape, layer.data_shape
    if w and len(w) >= 3:
        groups = layer.groups or 1
        kernel = "x".join(map(str, w[2:]))
        stride = f" s{layer.strides[0]}" if layer.strides and layer.strides[0] != 1 else ""
        grouped = f" g{groups}" if groups > 1 else ""
        at = f" @{'x'.join(map(str, data[2:]))}" if data and len(data) > 2 else ""
        return f"{w[1] * groups}->{w[0]} {kernel}{stride}{grouped}{at}"
    return "x".join(map(str, layer.out_shape or [])) or "-"


@dataclass(frozen=True)
class ConvLayer:
    """One convolution of a point: its kernels' time summed (a conv may take several)."""

    conv_index: int
    first: LayerTime
    time_us: float
    nnz: int | None


def conv_layers(profile: PointProfile) -> dict[int, ConvLayer]:
    """The point's convolutions by `conv_index`, each conv's kernels' time x calls summed."""
    out: dict[int, ConvLayer] = {}
    for layer in profile.layers:
        if layer.conv_index is None:
            continue
        time_us = layer.time_us * layer.calls
        seen = out.get(layer.conv_index)
        if seen is None:
            out[layer.conv_index] = ConvLayer(layer.conv_index, layer, time_us, layer.nnz)
        else:
            out[layer.conv_index] = ConvLayer(layer.conv_index, seen.first,
                                              seen.time_us + time_us,
                                              seen.nnz if seen.nnz is not None else layer.nnz)
    return out


def _signature(conv: ConvLayer) -> tuple:
    layer = conv.first
    return (tuple(layer.weight_shape or ()), tuple(layer.data_shape or ()),
            tuple(layer.strides or ()), layer.groups or 1)


def align_convs(base: dict[int, ConvLayer], other: dict[int, ConvLayer]) -> dict[int, int]:
    """`other`'s conv index -> `base`'s conv index of the same layer of the model.

    Indices alone do not always agree: a profile numbers convs in the order the compiler
    legalised them, and a quantised model's graph is legalised in another order than the
    float one (measured: MobileNetV2's int8 convs 53-55 are the float model's 55, 53, 54).
    So when the indices pair convs of different shapes, convs are paired by shape (weights,
    input, stride, groups) in index order instead, and the rest by index: channel pruning
    changes every shape, and its convs keep the float model's order."""
    if all(i in base and _signature(base[i]) == _signature(conv) for i, conv in other.items()):
        return {i: i for i in other}
    queues: dict[tuple, list[int]] = {}
    for i in sorted(base):
        queues.setdefault(_signature(base[i]), []).append(i)
    out: dict[int, int] = {}
    for i in sorted(other):
        queue = queues.get(_signature(other[i]))
        if queue:
            out[i] = queue.pop(0)
    used = set(out.values())
    for i in sorted(other):
        if i not in out and i in base and i not in used:
            out[i] = i
            used.add(i)
    return out


@dataclass(frozen=True)
class LayerSpeedup:
    """One conv of a pruned point against the same conv of its dense reference."""

    conv_index: int
    shape: str
    #: Compressed non-zeros / the dense layer's weights.
    density: float
    dense_us: float
    compressed_us: float

    @property
    def achieved(self) -> float:
        return self.dense_us / self.compressed_us

    @property
    def expected(self) -> float | None:
        """1 / density; None for a layer with no weight left (no finite ideal)."""
        return 1.0 / self.density if self.density > 0 else None

    @property
    def percent(self) -> float | None:
        return None if self.expected is None else 100.0 * self.achieved / self.expected


@dataclass(frozen=True)
class PairSpeedup:
    """A pruned point, its dense reference and their paired convolutions."""

    compressed: ProfiledPoint
    dense: ProfiledPoint
    layers: list[LayerSpeedup]
    #: Convs of the pruned point with no dense counterpart or no non-zero count.
    unpaired: int = 0

    @property
    def dense_us(self) -> float:
        return sum(layer.dense_us for layer in self.layers)

    @property
    def compressed_us(self) -> float:
        return sum(layer.compressed_us for layer in self.layers)

    @property
    def ideal_us(self) -> float:
        """The paired convs' time had each sped up by exactly 1 / its density."""
        return sum(layer.dense_us * layer.density for layer in self.layers)

    @property
    def achieved(self) -> float:
        return self.dense_us / self.compressed_us

    @property
    def expected(self) -> float | None:
        return self.dense_us / self.ideal_us if self.ideal_us > 0 else None

    @property
    def percent(self) -> float | None:
        """Time-weighted percent of expected speedup: ideal time / measured time over the
        paired convs, i.e. achieved / expected of their sums (layers weigh by their dense
        time, so a slow layer that misses counts more than a fast one)."""
        return None if self.expected is None else 100.0 * self.achieved / self.expected


def dense_reference(item: ProfiledPoint,
                    points: list[ProfiledPoint]) -> ProfiledPoint | None:
    """The dense point a compressed one is paired with (see `pair_speedups`)."""
    p = item.point
    same = [c for c in points if c.model == item.model and c.point.compression == "none"
            and c.point.tuning == p.tuning and c.point.baseline == p.baseline]
    for algorithm in (algorithm_family(p.algorithm), p.algorithm):
        candidates = [c for c in same if c.point.algorithm == algorithm]
        if candidates:  # the compressed one's layout, else NCHW, else the first other
            return min(candidates, key=lambda c: (c.point.layout != p.layout,
                                                  c.point.layout != NCHW))
    return None


def layer_pairs(compressed: PointProfile, dense: PointProfile) -> tuple[list[LayerSpeedup],
                                                                        int]:
    """Convs paired by `align_convs`, and how many of the compressed ones were not."""
    dense_convs, compressed_convs = conv_layers(dense), conv_layers(compressed)
    pairing = align_convs(dense_convs, compressed_convs)
    out, unpaired = [], 0
    for index, conv in sorted(compressed_convs.items()):
        ref = dense_convs.get(pairing[index]) if index in pairing else None
        weights = weight_count(ref.first) if ref is not None else None
        if (ref is None or conv.nnz is None or not weights or ref.time_us <= 0
                or conv.time_us <= 0):
            unpaired += 1
            continue
        out.append(LayerSpeedup(ref.conv_index, layer_shape(ref.first), conv.nnz / weights,
                                ref.time_us, conv.time_us))
    return out, unpaired


@dataclass
class SpeedupPairs:
    pairs: list[PairSpeedup] = field(default_factory=list)
    #: Compressed points with pruned layers but no profiled dense reference.
    unreferenced: list[ProfiledPoint] = field(default_factory=list)


def pair_speedups(points: list[ProfiledPoint]) -> SpeedupPairs:
    """Per-layer percent of expected speedup of every pruned point.

    Pairing rule. A compressed point (compression other than "none") is paired with the
    profiled point of the same model, dataset and platform, compression "none", the same
    tuning and the same kind (TVM or baseline), whose algorithm is the compressed one's
    dense-format family (`direct_csr` -> `direct`), else the same algorithm (a pruned
    model run by `gemm` against the dense model run by `gemm`; a baseline against the same
    runtime on the dense model); of that algorithm's layouts, the compressed one's, else
    NCHW (CSR algorithms run in NCHW), so a pruned point is measured against the dense
    layout it would otherwise have run in. Their convolutions are paired by `conv_index` (the
    model's conv order, the same in every variant), each conv's kernels' time x calls
    summed. A conv's density is the compressed conv's non-zero weights over the dense
    conv's weight count (its weight shape's product: for zero-pruned weights, the
    compressed conv's own); expected speedup 1 / density, achieved dense time /
    compressed time, percent achieved / expected. The point is kept when a paired conv
    has density below `PRUNED_BELOW` (quantized points have none). Overall: the ideal
    time (sum of dense time x density) over the measured compressed time, the same as
    achieved / expected of the sums.
    """
    out = SpeedupPairs()
    for item in points:
        if item.point.compression == "none":
            continue
        ref = dense_reference(item, points)
        if ref is None:
            if any(_is_pruned(layer) for layer in item.profile.layers):
                out.unreferenced.append(item)
            continue
        layers, unpaired = layer_pairs(item.profile, ref.profile)
        if any(layer.density < PRUNED_BELOW for layer in layers):
            out.pairs.append(PairSpeedup(item, ref, layers, unpaired))
    return out


def _is_pruned(layer: LayerTime) -> bool:
    weights = weight_count(layer)
    return (layer.conv_index is not None and layer.nnz is not None and bool(weights)
            and layer.nnz / weights < PRUNED_BELOW)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def speedup_table(pairs: list[PairSpeedup], model: ModelKey) -> Table:
    """One table per model: each pair's convs, then its overall row."""
    rows: list[list[Cell | str]] = []
    for pair in pairs:
        name = f"{pair.compressed.label} vs {pair.dense.label}"
        for i, layer in enumerate(pair.layers):
            rows.append([name if i == 0 else "", f"conv {layer.conv_index}", layer.shape,
                         f"{100 * layer.density:.1f}%", f"{layer.dense_us:.1f}",
                         f"{layer.compressed_us:.1f}", _x(layer.achieved),
                         _x(layer.expected), _pct(layer.percent)])
        note = f", {pair.unpaired} unpaired" if pair.unpaired else ""
        rows.append(["", Cell(f"overall ({len(pair.layers)} convs{note})"), "",
                     f"{100 * pair.ideal_us / pair.dense_us:.1f}%" if pair.dense_us else "-",
                     f"{pair.dense_us:.1f}", f"{pair.compressed_us:.1f}", _x(pair.achieved),
                     _x(pair.expected), _pct(pair.percent)])
    return Table(["pruned point vs dense", "layer", "shape (dense)", "density", "dense us",
                  "compressed us", "achieved", "expected", "% of expected"], rows,
                 f"{model.title}: per-layer percent of expected speedup (convs paired by "
                 "index with the dense point of the same algorithm family and tuning; "
                 "expected = 1 / density; overall = time-weighted: the ideal time, "
                 "sum of dense time x density, over the measured time)")
