""""Where the time goes": the report's view of the per-layer profiles `dlas profile` stores.

A profile belongs to a point's timing entry (`dlas.results.profiles`): a point is shown
with the profile of its row's *current* `timing_key` only, since a profile of an earlier
timing describes code the row no longer reports. Points without one are left out of the
section (and counted); a database without profiles gives a report without it.

Per model (dataset, platform and model label), the section shows:

1. **Breakdown**: each profiled point's latency (the whole model timed in the same rounds
   as its layers, `PointProfile.latency_median_ms`, so the parts and the whole agree) split
   by layer kind (`LayerTime.op`, time x calls summed), plus what the layers leave out
   (latency - layers sum, when positive: the runtime's dispatch, allocation, copies).
2. **Roofline**: the layers of at most `MAX_ROOFLINE_POINTS` points against the machine's
   measured roofs (`select_roofline_points` says which, and the rest are named).
3. **Percent of expected speedup per layer** (pruned points; see `pair_speedups` for the
   pairing rule): where the paper's per-model analysis says *how far* from the ideal a
   pruned model is, this says *which layers* lose it.

and once, the machine's measured limits beside the theoretical peak.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from dlas.profile.limits import LEVELS, MachineLimits, level_capacity
from dlas.report.breakdown import OUTSIDE, Breakdown, layer_ms, outside_ms
from dlas.report.data import NCHW, RUNTIME_NAMES, Point, algorithm_family
from dlas.report.profile_figures import breakdown_figure, layer_speedup_figure, roofline_figure
from dlas.report.render import Cell, Document, Heading, Image, Para, Table
from dlas.report.tables import COMPRESSION_ORDER, FAMILY_ORDER, short
from dlas.results.layer_profile import OPS, LayerTime, PointProfile

#: Points drawn per roofline chart: more dots than this are unreadable.
MAX_ROOFLINE_POINTS = 6
#: Density below this makes a layer pruned (float noise in nnz / weights aside).
PRUNED_BELOW = 0.999


# -- loading --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelKey:
    """What one set of charts covers: a model on one platform for one dataset."""

    dataset: str
    platform: str
    model_label: str

    @property
    def title(self) -> str:
        return f"{self.model_label} ({self.dataset}, {self.platform})"

    @property
    def slug(self) -> str:
        """A file-name stem for its figures."""
        text = f"{self.dataset}-{self.model_label}-{self.platform}".lower()
        return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:80]


@dataclass(frozen=True)
class ProfiledPoint:
    """A reported point with the stored profile of its current timing entry."""

    point: Point
    timing_key: str
    profile: PointProfile
    #: The limits its layers were placed against; None when not measured or unreadable.
    limits: MachineLimits | None

    @property
    def model(self) -> ModelKey:
        return ModelKey(self.point.dataset, self.point.platform, self.point.model_label)

    @property
    def label(self) -> str:
        """compression / algorithm (with its layout when not NCHW) / tuning, or
        compression / runtime for a baseline."""
        p = self.point
        if p.baseline:
            return f"{short(p.compression)} / {RUNTIME_NAMES.get(p.tuning, p.tuning)}"
        return f"{short(p.compression)} / {p.algorithm_label} / {p.tuning_label}"


@dataclass
class LoadedProfiles:
    """The profiles of a report's points, and what could not be used."""

    points: list[ProfiledPoint] = field(default_factory=list)
    #: Reported timed points (each key once).
    timed: int = 0
    #: Points whose stored profile belongs to an earlier timing entry (not shown).
    stale: int = 0
    #: Profiles whose stored limits this version cannot read (no roofline for them).
    unreadable_limits: int = 0


def parse_limits(raw: dict | None) -> MachineLimits | None:
    """The stored limits as `MachineLimits`; None when absent or of another schema."""
    if raw is None:
        return None
    try:
        return MachineLimits.model_validate(raw)
    except ValidationError:
        return None


def _sort_key(p: Point) -> tuple:
    """Dense before compressed, untuned before tuned, the paper's algorithm order,
    baselines after TVM: the order bars and tables list points in."""
    comp = COMPRESSION_ORDER.index(p.compression) if p.compression in COMPRESSION_ORDER \
        else len(COMPRESSION_ORDER)
    fam = FAMILY_ORDER.index(p.family) if p.family in FAMILY_ORDER else len(FAMILY_ORDER)
    return (p.baseline, p.tuned, p.tuning, comp, p.compression, fam, p.algorithm,
            p.layout != NCHW, p.layout, p.key)


def load_profiles(db_path: Path, points: Iterable[Point]) -> LoadedProfiles:
    """The stored profile of each reported timed point, looked up by its row's point key
    and *current* timing key; in `_sort_key` order."""
    from dlas.results.profiles import has_profiles, load_profile, profiled_entries
    from dlas.results.store import ResultStore

    timed = {p.key: p for p in points if p.is_timed}
    out = LoadedProfiles(timed=len(timed))
    with ResultStore(db_path) as store:
        if not timed or not has_profiles(store.conn):
            return out
        stored = profiled_entries(store.conn)
        profiled_keys = {key for key, _ in stored}
        current = store.timing_keys()
        for key, point in timed.items():
            timing_key = current.get(key)
            if (key, timing_key) not in stored:
                out.stale += key in profiled_keys
                continue
            loaded = load_profile(store.conn, key, str(timing_key))
            if loaded is None:
                continue
            profile, raw_limits = loaded
            limits = parse_limits(raw_limits)
            out.unreadable_limits += raw_limits is not None and limits is None
            out.points.append(ProfiledPoint(point, str(timing_key), profile, limits))
    out.points.sort(key=lambda item: _sort_key(item.point))
    return out


def by_model(points: Iterable[ProfiledPoint]) -> dict[ModelKey, list[ProfiledPoint]]:
    """Profiled points per model, models in name order, points in their given order."""
    out: dict[ModelKey, list[ProfiledPoint]] = {}
    for item in points:
        out.setdefault(item.model, []).append(item)
    return {k: out[k] for k in sorted(out, key=lambda m: (m.dataset, m.platform,
                                                          m.model_label))}


def unique_labels(points: list[ProfiledPoint]) -> list[str]:
    """Each point's label, numbered where two points of one chart would read the same
    (one compression under two parameter sets)."""
    counts = Counter(item.label for item in points)
    seen: Counter[str] = Counter()
    labels = []
    for item in points:
        seen[item.label] += 1
        labels.append(item.label if counts[item.label] == 1 else
                      f"{item.label} #{seen[item.label]}")
    return labels


# -- 1. breakdown ---------------------------------------------------------------------------


def breakdown(item: ProfiledPoint, label: str | None = None) -> Breakdown:
    """The point's latency by op kind; a kind outside `OPS` counts as "other"."""
    by_op = dict.fromkeys(OPS, 0.0)
    for layer in item.profile.layers:
        by_op[layer.op if layer.op in by_op else "other"] += layer_ms(layer)
    return Breakdown(label or item.label, item.profile.latency_median_ms,
                     sum(by_op.values()), by_op, outside_ms(item.profile))



def breakdown_columns(rows: Iterable[Breakdown]) -> list[str]:
    """The segments any row has time in, in `OPS` order (empty kinds are not printed)."""
    rows = list(rows)
    return [name for name in (*OPS, OUTSIDE) if any(r.segments()[name] > 0 for r in rows)]


def breakdown_table(rows: list[Breakdown], model: ModelKey) -> Table:
    columns = breakdown_columns(rows)
    body: list[list[Cell | str]] = [
        [r.label, f"{r.latency_ms:.3f}", f"{r.layers_sum_ms:.3f}",
         *(f"{r.segments()[c]:.3f}" for c in columns)] for r in rows]
    return Table(["point", "latency (ms)", "layers sum (ms)", *(f"{c} (ms)" for c in columns)],
                 body, f"{model.title}: where the time goes, ms per inference (time per "
                       "call x calls, summed per layer kind)")


# -- 2. roofline ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RooflineSelection:
    """The points one roofline chart draws, and those left out of it."""

    shown: list[ProfiledPoint]
    left_out: list[ProfiledPoint]


def _placed(item: ProfiledPoint) -> bool:
    return any(layer.intensity and layer.gflops for layer in item.profile.layers)


def _novelty(item: ProfiledPoint, chosen: list[ProfiledPoint]) -> int:
    """How many of compression, algorithm family and tuning no chosen point has yet."""
    p = item.point
    return sum((p.compression not in {c.point.compression for c in chosen},
                p.family not in {c.point.family for c in chosen},
                p.tuning not in {c.point.tuning for c in chosen}))


def select_roofline_points(points: list[ProfiledPoint],
                           cap: int = MAX_ROOFLINE_POINTS) -> RooflineSelection:
    """At most `cap` points with placed layers, the most different ones.

    First each algorithm's untuned dense TVM point (the reference every variant differs
    from), then the dense baselines, then the other baselines; then, one at a time, the
    point adding the most compressions, families and tunings not yet drawn (ties: the
    `_sort_key` order). Points with no placed layer are not candidates."""
    candidates = [item for item in points if _placed(item)]

    def first(item: ProfiledPoint) -> int:
        p = item.point
        if not p.baseline and not p.tuned and p.compression == "none":
            return 0
        return 1 if p.baseline and p.compression == "none" else 2 if p.baseline else 3

    chosen = sorted((c for c in candidates if first(c) < 3), key=first)[:cap]
    rest = [c for c in candidates if c not in chosen]
    while rest and len(chosen) < cap:
        best = max(rest, key=lambda c: _novelty(c, chosen))  # first of equals: order kept
        chosen.append(best)
        rest.remove(best)
    shown = [c for c in points if c in chosen]
    return RooflineSelection(shown, [c for c in candidates if c not in chosen])


def roofline_limits(points: list[ProfiledPoint]) -> MachineLimits | None:
    """The limits a chart's roofs are drawn from: the ones most of its points were placed
    against (a model profiled at two thread counts has two)."""
    known = [item.limits for item in points if item.limits is not None]
    if not known:
        return None
    counts = Counter(limits.model_dump_json() for limits in known)
    best = counts.most_common(1)[0][0]
    return next(limits for limits in known if limits.model_dump_json() == best)


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


# -- 4. the machine's limits ----------------------------------------------------------------


def distinct_limits(points: Iterable[ProfiledPoint]) -> list[MachineLimits]:
    """Each set of limits once, in first-use order."""
    out: dict[str, MachineLimits] = {}
    for item in points:
        if item.limits is not None:
            out.setdefault(item.limits.model_dump_json(), item.limits)
    return list(out.values())


def limits_name(limits: MachineLimits) -> str:
    cpus = f"CPUs {','.join(map(str, limits.cpus))}" if limits.cpus else "floating"
    return f"{limits.threads} thread(s), {cpus}, {limits.placement}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n} B"


def peak_table(all_limits: list[MachineLimits]) -> Table:
    rows: list[list[Cell | str]] = []
    for limits in all_limits:
        clock = limits.clock_ghz.get("measured")
        for dtype, peak in limits.peak_gflops.items():
            theory = limits.theoretical_gflops.get(dtype)
            unit = "GOP/s" if dtype == "int8" else "GFLOP/s"
            rows.append([limits_name(limits), dtype, f"{peak:.1f} {unit}",
                         "-" if theory is None else f"{theory:.1f} {unit}",
                         "-" if not theory else f"{100 * peak / theory:.0f}%",
                         "-" if clock is None else f"{clock:.2f} GHz",
                         limits.theoretical_basis])
    return Table(["limits", "dtype", "measured peak", "theoretical peak",
                  "measured / theoretical", "measured clock", "theoretical basis"], rows,
                 "Compute peaks measured with TVM-generated FMA kernels beside the CPU "
                 "table's bound at the measured clock (dlas/profile/limits.py)")


def bandwidth_table(all_limits: list[MachineLimits]) -> Table:
    rows: list[list[Cell | str]] = []
    for limits in all_limits:
        for level in [lv for lv in LEVELS if lv in limits.bandwidth_gbs]:
            capacity = (level_capacity(limits.level_bytes, limits.private_levels, level,
                                       limits.threads) if level in limits.level_bytes
                        and level != "DRAM" else None)
            rows.append([limits_name(limits), level, f"{limits.bandwidth_gbs[level]:.1f}",
                         _bytes(limits.bandwidth_bytes.get(level)), _bytes(capacity)])
    return Table(["limits", "level", "GB/s", "measured at", "capacity for these threads"],
                 rows, "Bandwidth per memory level: STREAM triad, all threads, bytes as "
                       "STREAM counts them (write-allocate not counted)")


# -- the section ----------------------------------------------------------------------------


def _intro(loaded: LoadedProfiles) -> Para:
    text = (f"Per-layer profiles (`dlas profile`) of {len(loaded.points)} of the "
            f"{loaded.timed} timed points: each layer timed alone, interleaved with the whole "
            "model in the same rounds. A point is shown with the profile of its current "
            "timing only; points without one are left out.")
    if loaded.stale:
        text += (f" {loaded.stale} point(s) have only a profile of an earlier timing (re-run "
                 "`dlas profile`).")
    if loaded.unreadable_limits:
        text += (f" {loaded.unreadable_limits} profile(s) carry limits this version cannot "
                 "read: no roofline for them.")
    return Para(text)


def _model_breakdown(doc: Document, model: ModelKey, items: list[ProfiledPoint],
                     out: Path, files: list[Path]) -> None:
    rows = [breakdown(item, label) for item, label in zip(items, unique_labels(items),
                                                          strict=True)]
    png = breakdown_figure(rows, model.title,
                                           out / "figures" / f"profile-time-{model.slug}.png")
    files.append(png)
    doc.add(Image(png, f"{model.title}: latency per point split by layer kind, plus the "
                       "time outside the layers (numbers: the table below and "
                       f"figures/{png.stem}.csv)"),
            breakdown_table(rows, model))


def _model_roofline(doc: Document, model: ModelKey, items: list[ProfiledPoint],
                    out: Path, files: list[Path]) -> None:
    limits = roofline_limits(items)
    same = [i for i in items if i.limits is not None and i.limits == limits]
    selection = select_roofline_points(same)
    if limits is None or not selection.shown:
        doc.add(Para(f"{model.title}: no roofline (no layer placed against measured "
                     "limits)."))
        return
    labels = dict(zip((i.point.key for i in items), unique_labels(items), strict=True))
    png = roofline_figure(
        [(labels[i.point.key], i.profile.layers) for i in selection.shown], limits,
        model.title, out / "figures" / f"profile-roofline-{model.slug}.png")
    files.append(png)
    caption = (f"{model.title}: roofline ({limits_name(limits)}); each dot a layer "
               "(x: FLOP per minimum byte moved, y: achieved GFLOP/s; marker: layer kind, "
               "colour: point); lines: measured compute peak and each memory level's "
               "bandwidth")
    if selection.left_out:
        caption += ("; left out (at most "
                    f"{MAX_ROOFLINE_POINTS} points per chart): "
                    + ", ".join(labels[i.point.key] for i in selection.left_out))
    other = [i for i in items if i.limits is not None and i.limits != limits]
    if other:
        caption += ("; placed against other limits, not drawn: "
                    + ", ".join(labels[i.point.key] for i in other))
    doc.add(Image(png, caption))


def _model_speedup(doc: Document, model: ModelKey, pairs: list[PairSpeedup], out: Path,
                   files: list[Path]) -> None:
    png = layer_speedup_figure(
        [(f"{p.compressed.label} vs {p.dense.label}",
          [(layer.conv_index, layer.percent) for layer in p.layers]) for p in pairs],
        model.title, out / "figures" / f"profile-speedup-{model.slug}.png")
    files.append(png)
    doc.add(Image(png, f"{model.title}: percent of expected speedup per conv layer of each "
                       "pruned point (100% = the layer sped up by 1 / its density)"),
            speedup_table(pairs, model))


def profile_section(doc: Document, loaded: LoadedProfiles, out: Path,
                    files: list[Path]) -> None:
    """Add "Where the time goes" when some reported point has a current profile
    (`load_profiles`); add nothing otherwise (a database without profiles reports as
    before)."""
    if not loaded.points:
        return
    doc.add(Heading("Where the time goes"), _intro(loaded))
    all_limits = distinct_limits(loaded.points)
    if all_limits:
        doc.add(Heading("The machine's limits", 3), peak_table(all_limits),
                bandwidth_table(all_limits))
    speedups = pair_speedups(loaded.points)
    for model, items in by_model(loaded.points).items():
        doc.add(Heading(model.title, 3))
        _model_breakdown(doc, model, items, out, files)
        _model_roofline(doc, model, items, out, files)
        pairs = [p for p in speedups.pairs if p.compressed.model == model]
        if pairs:
            _model_speedup(doc, model, pairs, out, files)
    if speedups.unreferenced:
        doc.add(Para("Pruned points without a profiled dense point of the same algorithm "
                     "family and tuning (no per-layer speedup): "
                     + "; ".join(f"{i.model.title}: {i.label}"
                                 for i in speedups.unreferenced)))
