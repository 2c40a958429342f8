"""The paper's figures as PNGs (matplotlib, Agg backend: no display needed).

Figure 3: accuracy against compression level for each pruning method, and float16/int8
(calibrated and not) beside dense. Figures 4-7: grouped bars of median inference time per
model, compression and algorithm, one row of panels per platform and tuning level, each
bar with a whisker over the interquartile range of its samples (`inference_panels` is the
data, also written as a CSV beside the PNG). An algorithm run in several activation
layouts has one bar, at its fastest layout (the speed tables' cell), named on the bar when
it is not NCHW; `layout_tables` lists every layout.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dlas.report.data import NCHW, ReportPoint, is_sparse_format
from dlas.report.tables import (
    COMPRESSION_ORDER,
    FAMILY_ORDER,
    Group,
    accuracy_tables,
    ordered,
    pruning_in,
    short,
    speed_cells,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110
_PRUNING_TITLES = {"weight_pruning": "weight pruning", "channel_pruning": "channel pruning",
                   "channel_pruning_physical": "channel pruning (physical)",
                   "block_pruning": "block pruning", "nm_pruning": "N:M pruning"}
#: Pruning options whose level counts whole filters; every other one counts weights.
_CHANNEL_LEVELS = frozenset({"channel_pruning", "channel_pruning_physical"})
_QUANT = [("float16", "float16"), ("int8", "int8 (calibrated)"),
          ("int8_uncalibrated", "int8 (uncalibrated)")]


def _pyplot():  # imported lazily: matplotlib costs a second the CLI should not always pay
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def _first_with(points: Iterable[ReportPoint], **match: str) -> ReportPoint | None:
    for p in points:
        if all(getattr(p, k) == v for k, v in match.items()):
            return p
    return None


def accuracy_figure(points: Iterable[ReportPoint], dataset: str, path: Path,
                    title: str = "") -> Path | None:
    """Figure 3 for one dataset; None when there is no accuracy to plot."""
    results = [p for p in points if p.is_result and p.dataset == dataset]
    tables = [t for t in accuracy_tables(results) if t.dataset == dataset]
    if not tables:
        return None
    table = tables[0]
    prunings = pruning_in(table.compressions)
    panels: list[tuple[str, list]] = []
    for comp in prunings:
        lines = []
        for row in table.rows:
            p = _first_with(results, model_label=row.model_label, compression=comp)
            if p is None:
                continue
            levels = [(float(lv["level"]), float(lv["accuracy"])) for lv in p.levels
                      if lv.get("level") is not None and lv.get("accuracy") is not None]
            if not levels and p.accuracy is not None and p.sparsity:
                levels = [(p.sparsity, p.accuracy)]
            if not levels:
                continue
            start = [(0.0, row.top1)] if row.top1 is not None else []
            chosen = p.chosen_level if p.chosen_level is not None else None
            lines.append((row.model_label, start + sorted(levels), chosen))
        if lines:
            panels.append((comp, lines))
    quant = [(c, label) for c, label in _QUANT if c in table.compressions]
    quant_rows = [r for r in table.rows
                  if r.top1 is not None or any(c in r.cells and r.cells[c].accuracy is not None
                                               for c, _ in quant)]
    if quant and quant_rows:
        panels.append(("quantization", quant_rows))
    if not panels:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False,
                             layout="constrained")
    for ax, (kind, data) in zip(axes[0], panels, strict=True):
        if kind == "quantization":
            _quant_panel(ax, data, quant)
            continue
        for label, xy, chosen in data:
            xs, ys = [100 * x for x, _ in xy], [100 * y for _, y in xy]
            (line,) = ax.plot(xs, ys, marker="o", markersize=3, label=label)
            if chosen is not None:
                near = min(xy, key=lambda v: abs(v[0] - chosen))
                ax.plot([100 * near[0]], [100 * near[1]], marker="*", markersize=12,
                        color=line.get_color(), linestyle="none")
        ax.set_title(_PRUNING_TITLES.get(kind, kind))
        ax.set_xlabel("pruned conv channels (%)" if kind in _CHANNEL_LEVELS
                      else "pruned conv weights (%)")
        ax.set_ylabel("top-1 accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title or f"Accuracy against compression ({dataset}); * = chosen level")
    return _save(fig, path)


def _quant_panel(ax, rows, quant: list[tuple[str, str]]) -> None:  # noqa: ANN001
    series = [("none", "dense float32")] + quant
    width = 0.8 / len(series)
    for i, (comp, label) in enumerate(series):
        xs, ys = [], []
        for j, row in enumerate(rows):
            acc = row.top1 if comp == "none" else (
                row.cells[comp].accuracy if comp in row.cells else None)
            if acc is not None:
                xs.append(j + (i - (len(series) - 1) / 2) * width)
                ys.append(100 * acc)
        ax.bar(xs, ys, width=width, label=label)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r.model_label for r in rows], rotation=15, fontsize=7, ha="right")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.set_title("data-type quantization")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)


def _family_color(family: str) -> str:
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]
    known = FAMILY_ORDER + sorted({family} - set(FAMILY_ORDER))
    return palette[known.index(family) % len(palette)] if family in known else palette[-1]


def _alg_order(algorithms: Iterable[str]) -> list[str]:
    algs = set(algorithms)
    fams = ordered({a[:-4] if is_sparse_format(a) else a for a in algs}, FAMILY_ORDER)
    out = []
    for f in fams:
        out += [a for a in (f, f"{f}_csr") if a in algs]
    return out + sorted(algs - set(out))


@dataclass(frozen=True)
class Bar:
    """One bar of Figures 4-7: a point's median time and the quartiles of its samples,
    which the bar's whisker spans (the dispersion a median alone hides)."""

    row: int  # panel row: platform x tuning group
    col: int  # panel column: model
    x: float
    group: str
    model: str
    compression: str
    algorithm: str
    family: str
    median_ms: float
    q1_ms: float | None
    q3_ms: float | None
    noisy: bool
    #: CSR weights (hatched).
    sparse: bool = False
    #: The algorithm's fastest layout, which the bar shows.
    layout: str = NCHW

    @property
    def iqr_ms(self) -> float | None:
        return None if self.q1_ms is None or self.q3_ms is None else self.q3_ms - self.q1_ms

    def whisker(self) -> tuple[float, float]:
        """(below, above) the median: to Q1 and Q3; zero where the quartiles are unknown."""
        if self.q1_ms is None or self.q3_ms is None:
            return 0.0, 0.0
        return max(0.0, self.median_ms - self.q1_ms), max(0.0, self.q3_ms - self.median_ms)


@dataclass(frozen=True)
class InferencePanels:
    """What Figures 4-7 draw for one dataset and device: panel rows (platform x tuning),
    panel columns (models), compressions per panel, the bars and their common width."""

    groups: list[Group]
    models: list[str]
    compressions: dict[tuple[int, int], list[str]]
    bars: list[Bar]
    width: float


def inference_panels(points: Iterable[ReportPoint], dataset: str,
                     device: str) -> InferencePanels | None:
    """The data of Figures 4-7 (None without timings): every verified point's bar with its
    median and the IQR whisker from its raw samples."""
    cells_by_group = {g: m for g, m in speed_cells(points).items()
                      if g.dataset == dataset and g.device == device}
    if not cells_by_group:
        return None
    models = ordered({m for per in cells_by_group.values() for m in per}, [])
    # one bar width for the whole figure, so bars compare across panels
    slots = max(len({a for c, a in cells if c == comp})
                for per in cells_by_group.values() for cells in per.values() for comp, _ in cells)
    width = 0.8 / slots
    bars: list[Bar] = []
    compressions: dict[tuple[int, int], list[str]] = {}
    for r, (group, per_model) in enumerate(cells_by_group.items()):
        for c, model in enumerate(models):
            cells = per_model.get(model, {})
            comps = ordered({cp for cp, _ in cells}, COMPRESSION_ORDER)
            compressions[(r, c)] = comps
            by_comp: dict[str, list[str]] = defaultdict(list)
            for cp, alg in cells:
                by_comp[cp].append(alg)
            for x, comp in enumerate(comps):
                algs = _alg_order(by_comp[comp])
                for i, alg in enumerate(algs):
                    p = cells[(comp, alg)]
                    bars.append(Bar(
                        row=r, col=c, x=x + (i - (len(algs) - 1) / 2) * width,
                        group=group.label, model=model, compression=comp, algorithm=alg,
                        family=p.family, median_ms=float(p.latency_ms or 0.0),
                        q1_ms=p.latency_q1_ms, q3_ms=p.latency_q3_ms, noisy=p.noisy,
                        sparse=p.sparse, layout=p.layout))
    return InferencePanels(list(cells_by_group), models, compressions, bars, width)


def write_bars_csv(bars: Iterable[Bar], path: Path) -> Path:
    """The numbers a figure plots, beside it: median, quartiles and IQR per bar, and each
    bar's layout when a bar is not NCHW (a figure without layouts keeps its columns)."""
    import csv

    bars = list(bars)
    with_layout = any(b.layout != NCHW for b in bars)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["platform_tuning", "model", "compression", "algorithm",
                         "median_ms", "q1_ms", "q3_ms", "iqr_ms", "noisy",
                         *(["layout"] if with_layout else [])])
        for b in bars:
            writer.writerow([b.group, b.model, b.compression, b.algorithm, b.median_ms,
                             b.q1_ms, b.q3_ms, b.iqr_ms, int(b.noisy),
                             *([b.layout] if with_layout else [])])
    return path


def inference_figure(points: Iterable[ReportPoint], dataset: str, device: str, path: Path,
                     title: str = "") -> Path | None:
    """Figures 4-7 for one dataset and device kind; None without timings.

    Bars are medians; whiskers span the samples' interquartile range; a red outline marks
    a point flagged noisy. The plotted numbers go to a CSV of the same name."""
    panels = inference_panels(points, dataset, device)
    if panels is None:
        return None
    plt = _pyplot()
    nrows, ncols = len(panels.groups), len(panels.models)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(4.2 * ncols, 5), 3.0 * nrows + 0.9),
                             squeeze=False, layout="constrained")
    for r, group in enumerate(panels.groups):
        for c, model in enumerate(panels.models):
            ax = axes[r][c]
            ax.set_title(f"{model}\n{group.label}", fontsize=8)
            comps = panels.compressions[(r, c)]
            if not comps:
                ax.text(0.5, 0.5, "not measured", ha="center", va="center",
                        transform=ax.transAxes, fontsize=8, color="grey")
                ax.set_axis_off()
                continue
            ax.set_xticks(range(len(comps)))
            ax.set_xticklabels([short(cp) for cp in comps], fontsize=8)
            ax.set_xlim(-0.5, max(len(comps), 2) - 0.5)
            ax.set_ylabel("inference time (ms)", fontsize=8)
            ax.tick_params(axis="y", labelsize=7)
            ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    legend: dict[str, Patch] = {}
    for bar in panels.bars:
        below, above = bar.whisker()
        hatch = "//" if bar.sparse else None
        axes[bar.row][bar.col].bar(
            bar.x, bar.median_ms, width=panels.width, color=_family_color(bar.family),
            hatch=hatch, edgecolor="red" if bar.noisy else "black",
            linewidth=1.2 if bar.noisy else 0.4, yerr=[[below], [above]], capsize=2,
            error_kw={"elinewidth": 0.8, "alpha": 0.8})
        if bar.layout != NCHW:  # the bar is the algorithm's fastest layout: say which
            axes[bar.row][bar.col].annotate(
                bar.layout, (bar.x, bar.median_ms), xytext=(0, 2),
                textcoords="offset points", ha="center", va="bottom", rotation=90,
                fontsize=5)
        legend.setdefault(bar.algorithm, Patch(facecolor=_family_color(bar.family),
                                               hatch=hatch, edgecolor="black", linewidth=0.4))
    order = _alg_order(legend)
    handles, labels = [legend[a] for a in order], list(order)
    if any(b.noisy for b in panels.bars):
        handles.append(Patch(facecolor="white", edgecolor="red", linewidth=1.2))
        labels.append("flagged noisy")
    fig.suptitle(title or f"Inference time, batch 1 ({dataset}, {device.upper()}): median, "
                 "whiskers = IQR of the samples; hatched = CSR sparse format", fontsize=10)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6),
               fontsize=8)
    write_bars_csv(panels.bars, path.with_suffix(".csv"))
    return _save(fig, path)
