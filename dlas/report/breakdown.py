"""A point's latency split by layer kind, plus the time outside every layer: the record
the report's breakdown table and figure share (`dlas.report.profiles` builds it,
`dlas.report.profile_figures` draws it)."""

from __future__ import annotations

from dataclasses import dataclass

from dlas.results.layer_profile import LayerTime, PointProfile

#: The bucket for the time outside every layer.
OUTSIDE = "outside the layers"


def layer_ms(layer: LayerTime) -> float:
    """A layer's share of one inference, ms: its time per call x calls per inference."""
    return layer.time_us * layer.calls / 1e3


@dataclass(frozen=True)
class Breakdown:
    """One point's latency split by layer kind (ms)."""

    label: str
    latency_ms: float
    layers_sum_ms: float
    #: ms per kind in `OPS` (kinds of no layer are 0).
    by_op: dict[str, float]
    #: Time in no layer (`PointProfile.outside_us`), ms.
    outside_ms: float

    def segments(self) -> dict[str, float]:
        """The stacked bar: each op kind, then the time outside the layers."""
        return {**self.by_op, OUTSIDE: self.outside_ms}


def outside_ms(profile: PointProfile) -> float:
    """A profile's time in no layer, ms: as measured (`PointProfile.outside_us`), or, in
    a profile stored before that, what the layers leave of the latency (0 where they add
    up to more)."""
    if profile.outside_us is not None:
        return profile.outside_us / 1e3
    return max(0.0, profile.latency_median_ms - profile.layers_sum_ms)
