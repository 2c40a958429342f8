"""The figures of "Where the time goes" (`dlas.report.profiles`), as PNGs beside the
report's other figures (matplotlib, Agg, the same helpers as `dlas.report.figures`).

Kept apart from `figures.py`: these draw per-layer profiles, not results rows, and take
the section's own records, so the paper's figures do not grow a second data model.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from dlas.profile.limits import LEVELS, MachineLimits
from dlas.report.breakdown import OUTSIDE, Breakdown
from dlas.report.figures import _pyplot, _save
from dlas.results.layer_profile import OPS, LayerTime

#: One colour per layer kind, the same in every chart; the outside segment is hatched.
OP_COLORS = {"conv2d": "#4c72b0", "depthwise_conv2d": "#55a868", "dense": "#c44e52",
             "pool": "#8172b3", "elementwise": "#dd8452", "layout": "#937860",
             "other": "#8c8c8c"}
#: One marker per layer kind on the roofline (colour there is the point's).
OP_MARKERS = {"conv2d": "o", "depthwise_conv2d": "D", "dense": "s", "pool": "v",
              "elementwise": "^", "layout": "x", "other": "."}
LEVEL_STYLES = {"L1": ":", "L2": "-.", "L3": "--", "DRAM": "-"}
#: One (label, layers) per point drawn on a roofline.
RooflineSeries = Sequence[tuple[str, Sequence[LayerTime]]]
#: One (label, [(conv index, percent of expected or None)]) per pruned point.
SpeedupSeries = Sequence[tuple[str, Sequence[tuple[int, float | None]]]]


def write_breakdown_csv(rows: Sequence[Breakdown], path: Path) -> Path:
    """The numbers the breakdown plots, beside it: ms per segment per point."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["point", "latency_ms", "layers_sum_ms", *OPS, OUTSIDE])
        for r in rows:
            segments = r.segments()
            writer.writerow([r.label, r.latency_ms, r.layers_sum_ms,
                             *(segments[name] for name in (*OPS, OUTSIDE))])
    return path


def breakdown_figure(rows: Sequence[Breakdown], title: str, path: Path) -> Path:
    """Stacked horizontal bars: one per point, segments per layer kind (ms), the time
    outside the layers hatched at the end; first point on top."""
    from matplotlib.patches import Patch

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 1.2 + 0.42 * len(rows)), layout="constrained")
    used: list[str] = []
    for y, r in enumerate(rows):
        left = 0.0
        for name, ms in r.segments().items():
            if ms <= 0:
                continue
            outside = name == OUTSIDE
            ax.barh(y, ms, left=left, color="white" if outside else OP_COLORS[name],
                    hatch="//" if outside else None, edgecolor="grey" if outside else "black",
                    linewidth=0.4, height=0.7)
            left += ms
            if name not in used:
                used.append(name)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r.label for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per inference", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    order = [n for n in (*OPS, OUTSIDE) if n in used]
    handles = [Patch(facecolor="white", hatch="//", edgecolor="grey") if n == OUTSIDE
               else Patch(facecolor=OP_COLORS[n], edgecolor="black", linewidth=0.4)
               for n in order]
    ax.legend(handles, order, fontsize=7, loc="lower right")
    ax.set_title(f"Where the time goes: {title}", fontsize=9)
    write_breakdown_csv(rows, path.with_suffix(".csv"))
    return _save(fig, path)


def _dots(layers: Sequence[LayerTime]) -> dict[str, tuple[list[float], list[float]]]:
    """(intensity, GFLOP/s) of the placed layers per op kind; layers without both out."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for layer in layers:
        if not layer.intensity or not layer.gflops:
            continue
        xs, ys = out.setdefault(layer.op if layer.op in OP_MARKERS else "other", ([], []))
        xs.append(layer.intensity)
        ys.append(layer.gflops)
    return out


def _roofs(ax, limits: MachineLimits, x_lo: float, x_hi: float) -> None:  # noqa: ANN001
    """The float32 peak (measured, and the theoretical dashed), other measured peaks, and
    each level's bandwidth up to the float32 peak."""
    import numpy as np

    peak = limits.peak_gflops["float32"]
    xs = np.geomspace(x_lo, x_hi, 200)
    for level in [lv for lv in LEVELS if lv in limits.bandwidth_gbs]:
        bw = limits.bandwidth_gbs[level]
        ax.plot(xs, np.minimum(xs * bw, peak), color="black", linewidth=0.9,
                linestyle=LEVEL_STYLES.get(level, "-"), label=f"{level} {bw:.0f} GB/s")
    for dtype, value in limits.peak_gflops.items():
        if dtype != "float32":
            ax.axhline(value, color="tab:purple", linewidth=0.9,
                       label=f"{dtype} peak {value:.0f} GOP/s")
    theory = limits.theoretical_gflops.get("float32")
    if theory:
        ax.axhline(theory, color="grey", linestyle="--", linewidth=0.8,
                   label=f"float32 theoretical {theory:.0f}")
    ax.axhline(peak, color="black", linewidth=1.4, label=f"float32 peak {peak:.0f} GFLOP/s")


def roofline_figure(series: RooflineSeries, limits: MachineLimits, title: str,
                    path: Path) -> Path:
    """Log-log roofline: the measured roofs and each point's placed layers."""
    from matplotlib.lines import Line2D

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 5.2), layout="constrained")
    colors = plt.get_cmap("tab10").colors
    xs_all: list[float] = []
    kinds: list[str] = []
    for i, (_label, layers) in enumerate(series):
        for op, (xs, ys) in _dots(layers).items():
            ax.scatter(xs, ys, marker=OP_MARKERS[op], color=colors[i % len(colors)], s=22,
                       alpha=0.8, linewidths=0.8)
            xs_all += xs
            kinds += [op] if op not in kinds else []
    peak = limits.peak_gflops["float32"]
    ridges = [peak / bw for bw in limits.bandwidth_gbs.values() if bw > 0]
    x_lo = min(xs_all + ridges, default=0.1) / 2
    x_hi = max(xs_all + ridges, default=100.0) * 2
    _roofs(ax, limits, x_lo, x_hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("intensity (FLOP / byte)", fontsize=8)
    ax.set_ylabel("achieved GFLOP/s", fontsize=8)
    ax.grid(alpha=0.3, which="both")
    roof_legend = ax.legend(fontsize=7, loc="lower right", title="roofs", title_fontsize=7)
    ax.add_artist(roof_legend)
    op_handles = [Line2D([], [], marker=OP_MARKERS[k], color="black", linestyle="none")
                  for k in [k for k in OPS if k in kinds]]
    ax.legend(op_handles, [k for k in OPS if k in kinds], fontsize=7, loc="upper left",
              title="layer kind", title_fontsize=7)
    point_handles = [Line2D([], [], marker="o", color=colors[i % len(colors)],
                            linestyle="none") for i in range(len(series))]
    fig.legend(point_handles, [label for label, _ in series], fontsize=7,
               loc="outside lower center", ncol=min(len(series), 3))
    ax.set_title(f"Roofline: {title}", fontsize=9)
    return _save(fig, path)


def layer_speedup_figure(series: SpeedupSeries, title: str, path: Path) -> Path:
    """Percent of expected speedup per conv layer, one line per pruned point; 100% is
    each layer sped up by 1 / its density."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.0, 3.8), layout="constrained")
    for label, values in series:
        known = [(i, v) for i, v in values if v is not None]
        ax.plot([i for i, _ in known], [v for _, v in known], marker="o", markersize=3,
                linewidth=0.9, label=label)
    ax.axhline(100.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("conv layer (model order)", fontsize=8)
    ax.set_ylabel("% of expected speedup", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"Per-layer percent of expected speedup: {title}", fontsize=9)
    return _save(fig, path)
