"""The contract of a tuning option (layer 5).

A tuning option is `fn(params, ctx) -> ScheduleHook | None`. The hook receives the
module after the algorithm's minimal schedules are applied and returns a (re)scheduled
module; `None` means the untuned baseline: the algorithms' minimal thread-parallel
schedules, as the paper's untuned points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tvm

from dlas.sweep.config import Budgets
from dlas.targets.base import TargetSpec

ScheduleHook = Callable[[tvm.IRModule, tvm.target.Target], tvm.IRModule]


@dataclass
class TuningContext:
    target: TargetSpec
    budgets: Budgets
    #: Persistent per-workspace directory (e.g. a tuning database shared by sweeps).
    work_dir: Path
    progress: bool = True
