"""Each layer against the machine's measured limits: a cache-aware roofline.

Why cache-aware: at batch size 1 most layers' working sets (inputs, weights, output) fit
in L2 or L3, and they are timed over repeated calls, so their data is already there when
a call starts. Judging them against DRAM bandwidth would call layers "memory-bound" that
never touch DRAM. So a layer's memory roof is the measured bandwidth of the smallest level
that holds its working set (its minimum bytes, `LayerTime.bytes`), and its roof is the
lower of that and the compute peak for its dtype:

    roof = min(peak[dtype], intensity x bandwidth[level])

Capacity of a level for the limits' `threads`: a level each core has its own instance of
(L1, L2 on x86: `MachineLimits.private_levels`) holds threads x one instance, since the
layer's threads split its data; a shared level (L3) holds one instance. The bandwidths
were measured the same way (all threads, each on its own share), so capacity and
bandwidth describe the same situation.

A layer above its roof (fraction > 1) is kept as measured, not clamped: the minimum-bytes
model can overstate traffic a cache absorbs, and timing noise exists. `over_roof` lists
them, so a report can say so instead of hiding it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlas.profile.limits import LEVELS, MachineLimits, level_capacity
from dlas.results.layer_profile import LayerTime

COMPUTE, MEMORY = "compute", "memory"
#: Layer dtypes that take the int8 peak when one was measured (else float32's).
_INT8_DTYPES = ("int8", "uint8")


@dataclass(frozen=True)
class Roof:
    """The attainable GFLOP/s at one intensity and working set, and what bounds it."""

    gflops: float
    #: The memory level whose bandwidth applies ("L1", "L2", "L3", "DRAM").
    level: str
    #: "compute" (the peak is lower) or "memory" (intensity x bandwidth is).
    bound: str


def peak_for(limits: MachineLimits, dtype: str | None) -> float:
    """The compute peak for `dtype`: its own where measured (int8, uint8 -> "int8"), else
    float32's, the one peak every MachineLimits has."""
    key = "int8" if dtype in _INT8_DTYPES else (dtype or "float32")
    return limits.peak_gflops.get(key, limits.peak_gflops["float32"])


def memory_level(limits: MachineLimits, working_set_bytes: int) -> str:
    """The smallest measured level whose capacity (for the limits' threads) holds the
    working set; DRAM when none does."""
    for level in LEVELS[:-1]:
        if level not in limits.bandwidth_gbs or level not in limits.level_bytes:
            continue
        capacity = level_capacity(limits.level_bytes, limits.private_levels, level,
                                  limits.threads)
        if working_set_bytes <= capacity:
            return level
    return "DRAM"


def attainable(limits: MachineLimits, intensity: float, working_set_bytes: int,
               dtype: str = "float32") -> Roof:
    """The roof at `intensity` (FLOP/byte) for a working set of `working_set_bytes`."""
    level = memory_level(limits, working_set_bytes)
    peak = peak_for(limits, dtype)
    memory = intensity * limits.bandwidth_gbs[level]
    if memory < peak:
        return Roof(memory, level, MEMORY)
    return Roof(peak, level, COMPUTE)


def _placeable(layer: LayerTime) -> bool:
    return bool(layer.flops) and bool(layer.bytes) and layer.time_us > 0


def place_layer(layer: LayerTime, limits: MachineLimits) -> LayerTime:
    """A copy of `layer` with intensity, achieved GFLOP/s and its roof filled in."""
    if not layer.flops or not layer.bytes:
        raise ValueError(f"layer {layer.name} has no flops or bytes to place")
    intensity = layer.flops / layer.bytes
    gflops = layer.flops / layer.time_us / 1e3  # FLOP/us -> GFLOP/s
    roof = attainable(limits, intensity, layer.bytes, layer.dtype or "float32")
    return layer.model_copy(update={
        "intensity": intensity, "gflops": gflops, "roof_gflops": roof.gflops,
        "roof_level": roof.level, "bound": roof.bound, "roof_fraction": gflops / roof.gflops,
    })


def place_layers(layers: list[LayerTime], limits: MachineLimits) -> list[LayerTime]:
    """Copies of `layers` placed on the roofline (those with flops, bytes and a time; the
    others keep None there), each with its share of the summed time (time_us x calls)."""
    total = sum(layer.time_us * layer.calls for layer in layers)
    placed = []
    for layer in layers:
        out = place_layer(layer, limits) if _placeable(layer) else layer.model_copy()
        if total > 0:
            out.share = layer.time_us * layer.calls / total
        placed.append(out)
    return placed


def over_roof(layers: list[LayerTime]) -> list[LayerTime]:
    """The layers measured above their roof (fraction > 1): cache effects the minimum-bytes
    model misses, or noise. Kept as measured; listed so reports can flag them."""
    return [layer for layer in layers if layer.roof_fraction is not None
            and layer.roof_fraction > 1.0]
