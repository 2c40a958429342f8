""""Where the time goes": the report's view of the per-layer profiles `dlas profile` stores.

The profiles are loaded by `dlas.report.profile_data`: a point is shown with the profile
of its row's *current* timing entry only, since a profile of an earlier timing describes
code the row no longer reports. Points without one are left out of the section (and
counted); a database without profiles gives a report without it.

Per model (dataset, platform and model label), the section shows:

1. **Breakdown**: each profiled point's latency (the whole model timed in the same rounds
   as its layers, `PointProfile.latency_median_ms`, so the parts and the whole agree) split
   by layer kind (`LayerTime.op`, time x calls summed), plus the time outside every layer
   (`PointProfile.outside_us`: the runtime's dispatch, allocation, copies).
2. **Roofline**: the layers of at most `MAX_ROOFLINE_POINTS` points against the machine's
   measured roofs (`select_roofline_points` says which, and the rest are named).
3. **Percent of expected speedup per layer** (pruned points; `dlas.report.layer_speedups`,
   whose `pair_speedups` gives the pairing rule): where the paper's per-model analysis
   says *how far* from the ideal a pruned model is, this says *which layers* lose it.

and once, the machine's measured limits beside the theoretical peak.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dlas.profile.limits import LEVELS, MachineLimits, level_capacity
from dlas.report.breakdown import OUTSIDE, Breakdown, layer_ms, outside_ms
from dlas.report.layer_speedups import PairSpeedup, pair_speedups, speedup_table
from dlas.report.profile_data import (
    LoadedProfiles,
    ModelKey,
    ProfiledPoint,
    by_model,
    unique_labels,
)
from dlas.report.profile_figures import breakdown_figure, layer_speedup_figure, roofline_figure
from dlas.report.render import Cell, Document, Heading, Image, Para, Table
from dlas.results.layer_profile import OPS

#: Points drawn per roofline chart: more dots than this are unreadable.
MAX_ROOFLINE_POINTS = 6


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
