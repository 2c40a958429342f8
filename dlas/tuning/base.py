"""The contract of a tuning option (layer 5).

A tuning option is `fn(params, ctx) -> ScheduleHook | None`. The hook receives the
lowered module *before* any schedule is applied (MetaSchedule extracts its tasks from, and
looks its database up by, unscheduled PrimFuncs) and returns it with the functions it
scheduled; every PrimFunc it leaves unchanged (and not marked `tirx.is_scheduled`) then
gets the algorithms' minimal thread-parallel schedules. `None` means the untuned
baseline: those minimal schedules everywhere, as the paper's untuned points.

A hook may carry a `report` attribute with a `summary()` dict (tasks tuned, reused,
trials, seconds); the runner stores it with the point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlas.compiler.pipeline import ScheduleHook
from dlas.sweep.config import Budgets
from dlas.targets.base import TargetSpec

__all__ = ["ScheduleHook", "TuningContext"]


@dataclass
class TuningContext:
    target: TargetSpec
    budgets: Budgets
    #: Persistent per-workspace directory (e.g. a tuning database shared by sweeps).
    work_dir: Path
    progress: bool = True
    #: Where a hook reports progress lines (the runner's console).
    say: Callable[[str], None] | None = None
