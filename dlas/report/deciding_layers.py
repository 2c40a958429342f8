"""For each observation, the layers that decide it.

An observation's verdict rests on comparisons of two points (`observations.ComparedPair`:
dense vs pruned, untuned vs tuned, the runner-up algorithm vs the fastest). When both
points have a stored profile, the difference of their latencies is split over the
model's layers: convolutions paired by `conv_index` (the model's conv order, the same in
every variant of one model, baselines included), every other layer summed per kind
(`LayerTime.op`: a fused elementwise kernel of one variant has no partner in another),
and what the layers leave out (the runtime's own work between kernels). The layers with
the largest change, with their share of the whole change and their place under the
roofline before and after, say *why* the verdict came out as it did: which convs tuning
fixed, which pruned convs lose the expected speedup, where spatial pack wins.

The latencies used are the profiles' own (the whole model timed in the same rounds as its
layers), so the parts add up to the whole they are a share of.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dlas.report.breakdown import OUTSIDE, outside_ms
from dlas.report.layer_speedups import (
    ConvLayer,
    align_convs,
    conv_layers,
    layer_shape,
    weight_count,
)
from dlas.report.observations.verdict import ComparedPair, Observation
from dlas.report.profile_data import ProfiledPoint
from dlas.results.layer_profile import PointProfile

#: Layers named per comparison, and comparisons shown per observation part.
TOP_LAYERS = 3
MAX_COMPARISONS = 3


@dataclass(frozen=True)
class LayerChange:
    """One layer (or one kind of non-conv layer, or the time outside the layers) in both
    points of a comparison."""

    name: str
    base_us: float
    other_us: float
    base_roof: float | None = None
    other_roof: float | None = None
    #: The other point's non-zeros over the base layer's weights (pruned convs only).
    density: float | None = None

    @property
    def delta_us(self) -> float:
        return self.other_us - self.base_us

    @property
    def ideal_us(self) -> float:
        """The time had the layer sped up by exactly 1 / density (no change expected of a
        layer without a density: pooling, elementwise, the runtime's own work)."""
        return self.base_us * self.density if self.density is not None else self.base_us

    @property
    def lost_us(self) -> float:
        """Time above the ideal: what keeps a pruned point from its expected speedup."""
        return self.other_us - self.ideal_us


@dataclass(frozen=True)
class ComparisonLayers:
    """A comparison's latency change split over its layers, largest change first."""

    comparison: ComparedPair
    base: ProfiledPoint
    other: ProfiledPoint
    changes: list[LayerChange]

    @property
    def base_ms(self) -> float:
        return self.base.profile.latency_median_ms

    @property
    def other_ms(self) -> float:
        return self.other.profile.latency_median_ms

    @property
    def expected(self) -> bool:
        return self.comparison.kind == "expected"

    def amount(self, change: LayerChange) -> float:
        """What a layer adds to the verdict: its change of time, or (pruned points) its
        time lost against the ideal."""
        return change.lost_us if self.expected else change.delta_us

    @property
    def whole_us(self) -> float:
        return sum(self.amount(c) for c in self.changes)

    def share(self, change: LayerChange) -> float | None:
        """The layer's part of the whole (signed: a layer that moved against the whole
        has a negative share); None when the whole is nil."""
        whole = self.whole_us
        return self.amount(change) / whole if whole else None

    def top(self, n: int = TOP_LAYERS) -> list[LayerChange]:
        return sorted(self.changes, key=lambda c: -abs(self.amount(c)))[:n]

    def top_share(self, n: int = TOP_LAYERS) -> float | None:
        whole = self.whole_us
        return sum(self.amount(c) for c in self.top(n)) / whole if whole else None

    @property
    def percent_expected(self) -> float | None:
        """Achieved speedup / expected speedup over the whole model (pruned points)."""
        ideal = sum(c.ideal_us for c in self.changes)
        if ideal <= 0 or self.other_ms <= 0:
            return None
        expected = 1000.0 * self.base_ms / ideal
        return 100.0 * (self.base_ms / self.other_ms) / expected

    @property
    def ranking(self) -> float:
        """Comparisons shown first: the largest relative change, or the pruned point that
        reaches the smallest share of its expected speedup."""
        if self.expected:
            pct = self.percent_expected
            return pct if pct is not None else 1e9
        return -abs(self.other_ms / self.base_ms - 1) if self.base_ms > 0 else 0.0


@dataclass(frozen=True)
class _Slot:
    """One layer key's time in one point."""

    name: str
    us: float
    roof: float | None = None
    nnz: int | None = None
    weights: int | None = None


def _layer_times(profile: PointProfile, convs: dict[int, ConvLayer],
                 renumber: dict[int, int] | None = None) -> dict[str, _Slot]:
    """Convs (`conv_layers` of the profile) by index (`renumber`ed to the other point's,
    `align_convs`), other layers per kind, and the time outside the layers."""
    out: dict[str, _Slot] = {}
    for own, conv in convs.items():
        index = renumber.get(own, -1 - own) if renumber is not None else own
        kind = conv.first.op.replace("_conv2d", "").replace("conv2d", "conv")
        out[f"conv:{index}"] = _Slot(f"{kind} {index} ({layer_shape(conv.first)})",
                                     conv.time_us, conv.first.roof_fraction, conv.nnz,
                                     weight_count(conv.first))
    others: dict[str, float] = {}
    for layer in profile.layers:
        if layer.conv_index is None:
            others[layer.op] = others.get(layer.op, 0.0) + layer.time_us * layer.calls
    for op, us in others.items():
        out[f"op:{op}"] = _Slot(f"{op} layers", us)
    out["outside"] = _Slot(OUTSIDE, 1000.0 * outside_ms(profile))
    return out


def _density(before: _Slot, after: _Slot) -> float | None:
    if after.nnz is None or not before.weights:
        return None
    return min(after.nnz / before.weights, 1.0)


def explain(comparison: ComparedPair, profiled: dict[str, ProfiledPoint]
            ) -> ComparisonLayers | None:
    """The comparison's change split over layers; None unless both points are profiled."""
    base, other = profiled.get(comparison.base.key), profiled.get(comparison.other.key)
    if base is None or other is None or base.point.key == other.point.key:
        return None
    base_convs, other_convs = conv_layers(base.profile), conv_layers(other.profile)
    before = _layer_times(base.profile, base_convs)
    after = _layer_times(other.profile, other_convs, align_convs(base_convs, other_convs))
    changes = []
    nothing = _Slot("", 0.0)
    for key in [*before, *(k for k in after if k not in before)]:
        b, a = before.get(key, nothing), after.get(key, nothing)
        density = _density(b, a) if comparison.kind == "expected" else None
        changes.append(LayerChange(b.name or a.name, b.us, a.us, b.roof, a.roof, density))
    return ComparisonLayers(comparison, base, other, changes)


def _roof(change: LayerChange) -> str:
    if change.base_roof is None or change.other_roof is None:
        return ""
    return f"; {100 * change.base_roof:.0f}% -> {100 * change.other_roof:.0f}% of its roof"


def _ms(us: float) -> str:
    return f"{us / 1000:.3f}"


def _change_text(layers: ComparisonLayers, change: LayerChange) -> str:
    share = layers.share(change)
    if layers.expected:
        of = f", {100 * share:.0f}% of the time lost" if share is not None else ""
        ideal = ("" if change.density is None else
                 f", ideal {_ms(change.ideal_us)} ms (every weight pruned)"
                 if change.density == 0 else
                 f", ideal {_ms(change.ideal_us)} ms at density {change.density:.1%}")
        return (f"{change.name} {_ms(change.base_us)} -> {_ms(change.other_us)} ms{ideal}"
                f"{of}{_roof(change)}")
    of = f", {100 * share:.0f}% of the change" if share is not None else ""
    return f"{change.name} {_ms(change.base_us)} -> {_ms(change.other_us)} ms{of}{_roof(change)}"


def describe(layers: ComparisonLayers, n: int = TOP_LAYERS) -> str:
    """One line: the two latencies, the top layers' change (or time lost against the
    ideal) and its share, their place under the roof."""
    c = layers.comparison
    top = layers.top_share(n)
    what = "of the time lost" if layers.expected else "of the change"
    together = (f"; these {len(layers.top(n))} layers: {100 * top:.0f}% {what}"
                if top is not None else "")
    pct = layers.percent_expected
    reached = f", {pct:.0f}% of its expected speedup" if layers.expected and pct else ""
    return (f"{c.case}: {layers.base.label} {layers.base_ms:.3f} ms -> {layers.other.label} "
            f"{layers.other_ms:.3f} ms{reached}{together}: "
            + "; ".join(_change_text(layers, change) for change in layers.top(n)))


def deciding_lines(comparisons: Iterable[ComparedPair], profiled: dict[str, ProfiledPoint],
                   limit: int = MAX_COMPARISONS) -> tuple[list[str], int]:
    """Lines for the comparisons with both points profiled, in `ComparisonLayers.ranking`
    order, at most `limit`; and how many comparisons had no profiles."""
    explained, missing = [], 0
    for comparison in comparisons:
        layers = explain(comparison, profiled)
        if layers is None:
            missing += 1
        else:
            explained.append(layers)
    explained.sort(key=lambda x: x.ranking)
    return [describe(x) for x in explained[:limit]], missing


def observation_layers(observation: Observation, profiled: dict[str, ProfiledPoint]
                       ) -> list[tuple[str, list[str]]]:
    """Per part with compared points: a heading line (how many comparisons are shown, and
    how many had no profiles, so a missing explanation is visible) and `deciding_lines`."""
    out: list[tuple[str, list[str]]] = []
    for part in observation.parts:
        if not part.comparisons:
            continue
        lines, missing = deciding_lines(part.comparisons, profiled)
        total = len(part.comparisons)
        head = f"{observation.roman}, {part.name}: the layers that decide it"
        if not lines:
            out.append((f"{head}: none of its {total} comparison(s) has both points "
                        "profiled (`dlas profile CONFIG` profiles them)", []))
            continue
        rest = total - missing - len(lines)
        tail = [f"{rest} more profiled not shown"] if rest > 0 else []
        tail += [f"{missing} without profiles of both points"] if missing else []
        order = "the largest relative change, or the least of the expected speedup, first"
        more = f"; {', '.join(tail)}" if tail else ""
        out.append((f"{head} ({len(lines)} of {total} comparison(s), {order}{more})", lines))
    return out
