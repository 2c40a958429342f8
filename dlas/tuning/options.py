"""The tuning options dlas ships (layer 5)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlas.registry import NoParams, register

if TYPE_CHECKING:
    from dlas.tuning.base import ScheduleHook, TuningContext


@register("tuning", "none",
          description="untuned: each algorithm's minimal thread-parallel schedule (the "
                      "paper's untuned baseline)")
def untuned(params: NoParams, ctx: TuningContext) -> ScheduleHook | None:
    return None
