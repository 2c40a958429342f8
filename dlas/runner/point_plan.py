"""One sweep point's plan: the stages it runs and what ends it, read off the stage graph.

Both executors (`dlas.runner.runner`, `dlas.runner.ray_executor`) walk the same plan, so
a point means the same work in either: its stored stages up to the timing (`prepared`,
root first: train ... compile, or train ... import for a baseline), then its timing entry
(`timed`: measure, or baseline), which is timed with the model's other variants. A point
whose target nothing here can run ends at its compile (`unmeasurable` says why). Nothing
here names a stage: the chain comes from the stages' parents (`dlas.stages.CHAINS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlas.results.row import ResultRow
from dlas.results.store import ResultStore
from dlas.runner.rows import finish_row, record_timing
from dlas.stages.base import StoredStage
from dlas.stages.chains import point_stages
from dlas.stages.facts import (
    CompileFacts,
    CompressFacts,
    Facts,
    ImportFacts,
    MeasureFacts,
    TrainFacts,
)
from dlas.stages.keys import KeyMemo, StageKeys, stage_keys
from dlas.stages.timed import TimedStage
from dlas.sweep.grid import Point
from dlas.targets.resolve import resolve_target


@dataclass(frozen=True)
class PointPlan:
    """What an executor does for one point of a sweep."""

    #: The point's 1-based place in the sweep's grid.
    index: int
    point: Point
    keys: StageKeys
    #: Stored stages before the timing, root first: what an executor prepares.
    prepared: tuple[StoredStage[Any, Any], ...]
    #: The timing stage that ends the point; None where nothing here can run its target.
    timed: TimedStage | None
    #: Why nothing here can run the point's target (its compile is still kept).
    unmeasurable: str | None = None

    @property
    def stored(self) -> tuple[StoredStage[Any, Any], ...]:
        """Every stored stage of the point, root first (the timing last, if any)."""
        return (*self.prepared, self.timed) if self.timed is not None else self.prepared

    @property
    def group(self) -> str:
        """The timing group: a model's variants are timed together, interleaved."""
        from dlas.runner.timing_groups import group_key

        return group_key(self.point)


def plan_point(index: int, point: Point, memo: KeyMemo | None = None) -> PointPlan:
    """The plan of a runnable point (a blocked one has none: it is recorded as such)."""
    stored = [s for s in point_stages(point) if isinstance(s, StoredStage)]
    last = stored[-1]
    assert isinstance(last, TimedStage), f"a point's chain ends in a timing, not {last}"
    unmeasurable = None if point.is_baseline else resolve_target(point).unmeasurable
    return PointPlan(index, point, stage_keys(point, memo), tuple(stored[:-1]),
                     None if unmeasurable else last, unmeasurable)


def complete_row(store: ResultStore, plan: PointPlan, row: ResultRow,
                 facts: Mapping[str, Facts], measured: MeasureFacts) -> ResultRow:
    """Fill a timed point's row from its stages' facts (by stage name) and its timing,
    with every timing run its timing entry has had (the history)."""
    assert plan.timed is not None
    key = plan.keys[plan.timed.name]
    history = record_timing(store, plan.point, key, measured)
    trained, compressed, imported = facts["train"], facts["compress"], facts["import"]
    compiled = facts.get("compile")
    assert isinstance(trained, TrainFacts) and isinstance(compressed, CompressFacts)
    assert isinstance(imported, ImportFacts)
    assert compiled is None or isinstance(compiled, CompileFacts)
    return finish_row(row, plan.point, trained, compressed, imported, compiled, measured,
                      history, key)
