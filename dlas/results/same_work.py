"""The same work, read twice: a check every pruning study carries for free.

A dense kernel does the same arithmetic whatever its weights hold, so one untuned dense
algorithm timed on a model's unpruned weights and on its pruned weights (same shapes, same
precision) must read the same. When the two differ beyond their intervals the host biases
timings by more than the intervals say (alignment, placement sub-states, denormals: issue
"numbers that hold on every host"), and a verdict smaller than that gap is not safe. On a
Zen 3 one sweep read 13-17% apart on such pairs, in both directions.

`pairs` finds them among rows (`ResultRow`) and relates them in one placement
(`dlas.results.placed.relate`); the run's summary prints `lines`, the report its own
section from the same pairs. Tuned rows are left out: two searches may find different
schedules. Baselines (ONNX Runtime, PyTorch) are dense kernels too, and are paired.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from dlas.results import placed

if TYPE_CHECKING:
    from dlas.results.row import ResultRow

T = TypeVar("T")

#: The compression a pair's first member has, where the group holds it.
UNCOMPRESSED = "none"


def group_pairs(items: Sequence[T], key: Callable[[T], Hashable | None],
                compression: Callable[[T], str | None]) -> list[tuple[T, T]]:
    """Items of one `key` (None: not eligible) under different compressions, each paired
    with the group's uncompressed item, or with the group's first where none is."""
    groups: dict[Hashable, list[T]] = defaultdict(list)
    for item in items:
        k = key(item)
        if k is not None:
            groups[k].append(item)
    out: list[tuple[T, T]] = []
    for members in groups.values():
        base = next((m for m in members if compression(m) == UNCOMPRESSED), members[0])
        seen = {compression(base)}
        for m in members:
            if compression(m) not in seen:
                seen.add(compression(m))
                out.append((base, m))
    return out


def _tuning_name(tuning: str | None) -> str:
    return (tuning or "none").split("(")[0]


def work_key(row: ResultRow) -> Hashable | None:
    """What makes two rows the same work: an ok dense untuned kernel (or baseline) of one
    model, dataset, target and precision, with the same parameter and MAC counts."""
    if row.status != "ok" or not row.latency_median_ms or row.weight_format == "csr":
        return None
    if row.backend in (None, "tvm") and _tuning_name(row.tuning) != "none":
        return None
    if row.params is None or row.macs is None:
        return None
    return (row.dataset, row.model, row.target, row.backend, row.algorithm, row.tuning,
            row.precision, row.params, row.macs)


@dataclass(frozen=True)
class SameWorkPair:
    """One kernel on two weight sets: `relation` is `a` (uncompressed) against `b`."""

    a: ResultRow
    b: ResultRow
    relation: placed.Relation

    @property
    def disagrees(self) -> bool:
        return self.relation.verdict in ("a_faster", "b_faster")

    @property
    def apart(self) -> float | None:
        """How far apart, as a fraction (0.15: 15%); None when not comparable."""
        r = self.relation.ratio
        return None if r is None else math.exp(abs(math.log(r))) - 1.0


def pairs(rows: Sequence[ResultRow]) -> list[SameWorkPair]:
    return [SameWorkPair(a, b, placed.relate(a, b))
            for a, b in group_pairs(rows, work_key, lambda r: r.compression)]


def lines(found: Sequence[SameWorkPair], width: int) -> list[str]:
    """What the summary says: nothing without pairs; one line when they agree; the
    disagreeing pairs, worst first, when they do not."""
    comparable = [p for p in found if p.apart is not None]
    if not comparable:
        return []
    bad = sorted((p for p in comparable if p.disagrees), key=lambda p: -(p.apart or 0.0))
    worst = max(p.apart or 0.0 for p in comparable)
    if not bad:
        return textwrap.wrap(
            f"same work: {len(comparable)} dense kernel(s) on two weight sets agree within "
            f"their intervals ({worst:.1%} apart at most)", width=width,
            subsequent_indent="  ", break_on_hyphens=False)
    text = (f"same work reads differently: {len(bad)} of {len(comparable)} dense kernel(s) "
            f"timed on two weight sets differ beyond their intervals, up to "
            f"{bad[0].apart:.1%}; this host biases timings by that much, so a verdict "
            "smaller than it is not safe: "
            + "; ".join(_pair_text(p) for p in bad[:3]))
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


def _pair_text(p: SameWorkPair) -> str:
    """'direct 2.290 ms (none) vs 1.920 (weight_pruning), near'."""
    where = p.relation.placement
    fa, fb = placed.figure_in(p.a, where), placed.figure_in(p.b, where)
    ms_a = fa.median_ms if fa else p.a.latency_median_ms or 0.0
    ms_b = fb.median_ms if fb else p.b.latency_median_ms or 0.0
    name = p.a.algorithm or p.a.backend or "?"
    return (f"{name} {ms_a:.3f} ms ({(p.a.compression or '-').split('(')[0]}) vs {ms_b:.3f} "
            f"({(p.b.compression or '-').split('(')[0]}), {where or 'unprobed'}")
