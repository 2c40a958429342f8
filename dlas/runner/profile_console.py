"""How `dlas profile` prints: per point its latency, what its layers add up to, and its
costliest layers with their place on the roofline; or all of it as JSON."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from dlas.results.layer_profile import LayerTime
from dlas.runner.fit import Column, fitted_table
from dlas.runner.profiling import ProfileOutcome, SweepProfiles

#: Layers shown per point in the console (all of them are in the JSON).
TOP_LAYERS = 8


def _point_title(item: ProfileOutcome) -> str:
    row = item.row
    return " / ".join(str(v) for v in (row.model, row.compression, row.algorithm, row.tuning))


def _shape(layer: LayerTime) -> str:
    if layer.weight_shape:
        o, i, kh, kw = layer.weight_shape
        hw = "x".join(map(str, (layer.data_shape or [0, 0, 0, 0])[2:]))
        stride = f" s{layer.strides[0]}" if layer.strides and layer.strides[0] != 1 else ""
        groups = f" g{layer.groups}" if layer.groups and layer.groups > 1 else ""
        return f"{i * (layer.groups or 1)}->{o} {kh}x{kw}{stride}{groups} @{hw}"
    return "x".join(map(str, layer.out_shape or []))


def _pct(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.0f}%"


def limits_line(limits: dict[str, Any]) -> str:
    peak = limits.get("peak_gflops", {})
    theory = limits.get("theoretical_gflops", {})
    bw = limits.get("bandwidth_gbs", {})
    parts = [f"{dtype} {value:.0f} GFLOP/s" + (f" (theoretical {theory[dtype]:.0f})"
                                                 if dtype in theory else "")
             for dtype, value in peak.items()]
    levels = ", ".join(f"{level} {value:.0f}" for level, value in bw.items())
    return (f"machine limits, {limits.get('threads')} thread(s): peak {'; '.join(parts)}; "
            f"bandwidth GB/s: {levels}")


#: The per-layer table's columns: the numbers are never cut; a layer's name gives way
#: first (cut with an ellipsis), then its shape; `bound` is left out before the rest.
_LAYER_COLUMNS = (
    Column("#", "#", justify="right"),
    Column("layer", "layer", min_width=12, max_width=40, flexible=True),
    Column("op", "op"),
    Column("shape", "shape", min_width=10),
    Column("us", "us", justify="right"),
    Column("share", "share", justify="right"),
    Column("gflops", "GFLOP/s", justify="right"),
    Column("roof", "roof", justify="right"),
    Column("bound", "bound", priority=10),
)


def point_table(item: ProfileOutcome, width: int | None = None) -> Table:
    """The point's costliest layers, one line each in `width` columns (unbounded: None)."""
    profile = item.profile
    assert profile is not None
    ci = (f" [{profile.latency_ci_ms[0]:.3f}, {profile.latency_ci_ms[1]:.3f}]"
          if profile.latency_ci_ms else "")
    outside = ("" if profile.outside_us is None else
               f" + outside them {profile.outside_us / 1e3:.3f} ms = "
               f"{_pct(profile.accounted)} of it")
    title = (f"{_point_title(item)}: {profile.latency_median_ms:.3f} ms{ci}; layers "
             f"{profile.layers_sum_ms:.3f} ms{outside}; "
             f"{len(profile.layers)} layers, placement {profile.placement}"
             + (f"; kernels replayed back to back {profile.replay_ms:.3f} ms"
                if profile.replay_ms else ""))
    top = sorted(profile.layers, key=lambda layer: -layer.time_us * layer.calls)[:TOP_LAYERS]
    rows = [[str(layer.index), layer.name, layer.op, _shape(layer), f"{layer.time_us:.1f}",
             _pct(layer.share), "" if layer.gflops is None else f"{layer.gflops:.1f}",
             _pct(layer.roof_fraction), f"{layer.bound or ''} {layer.roof_level or ''}".strip()]
            for layer in sorted(top, key=lambda layer: layer.index)]
    table = fitted_table(_LAYER_COLUMNS, rows, width or 10**6).table
    table.title = title
    return table


def as_json(result: SweepProfiles) -> dict[str, Any]:
    """`dlas profile --json`: per point its latency, its layers, the time outside them
    (`outside_us`) and how well the two add up to the latency (`accounted`), and the
    limits used."""
    limits: list[dict[str, Any]] = []
    points = []
    for item in result.points:
        entry: dict[str, Any] = {
            "point_key": item.point.key, "timing_key": item.timing_key,
            "model": item.row.model, "compression": item.row.compression,
            "algorithm": item.row.algorithm, "tuning": item.row.tuning,
            "target": item.row.target, "error": item.error}
        if item.profile is not None:
            entry.update(item.profile.model_dump(exclude={"key"}))
            entry["accounted"] = item.profile.accounted
        if item.limits is not None and item.limits not in limits:
            limits.append(item.limits)
        points.append(entry)
    return {"limits": limits, "points": points, "unmeasured_points": result.unmeasured}
