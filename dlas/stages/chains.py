"""The stage graph as points meet it: every stage in graph order, the result stages (a
point's last), each one's chain from the root, and which chain a point runs.

Its own module so that the key code (`dlas.stages.keys`) and the executors can ask for a
point's stages without importing the package that re-exports both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlas.stages.base import Stage
from dlas.stages.baseline import BASELINE
from dlas.stages.compile import COMPILE
from dlas.stages.compress import COMPRESS
from dlas.stages.data import DATA
from dlas.stages.graph import chain_to, graph_order, leaves
from dlas.stages.import_model import IMPORT
from dlas.stages.measure import MEASURE
from dlas.stages.timed import TimedStage
from dlas.stages.train import TRAIN

if TYPE_CHECKING:
    from dlas.sweep.grid import Point

#: Every stage, in graph order: derived from the stages' `parent` links
#: (`dlas.stages.graph`), so a new stage with a parent takes its place everywhere.
ALL: tuple[Stage[Any], ...] = graph_order((DATA, TRAIN, COMPRESS, IMPORT, COMPILE, MEASURE,
                                           BASELINE))
BY_NAME: dict[str, Stage[Any]] = {stage.name: stage for stage in ALL}
STAGES: tuple[str, ...] = tuple(BY_NAME)
#: The stages whose output is a point's result (measure; baseline for a baseline point).
RESULT_STAGES: tuple[Stage[Any], ...] = leaves(ALL)
#: The result stages by name: the stages the timing worker computes (a model's variants
#: together) and a timing pass runs again. Every result stage is timed; checked here.
TIMED_STAGES: frozenset[str] = frozenset(stage.name for stage in RESULT_STAGES)
assert all(isinstance(stage, TimedStage) for stage in RESULT_STAGES), RESULT_STAGES
#: Each result stage's chain from the root, as a point ending there runs it.
CHAINS: dict[str, tuple[Stage[Any], ...]] = {leaf.name: chain_to(leaf, ALL)
                                             for leaf in RESULT_STAGES}


def result_stage(point: Point) -> TimedStage:
    """The stage whose output is the point's result: the baseline's runtime for a baseline
    point, else measuring its compiled variant."""
    return BASELINE if point.is_baseline else MEASURE


def point_stages(point: Point) -> tuple[Stage[Any], ...]:
    """The stages a point runs, root first: a baseline point's runtime replaces compile
    and measure."""
    return CHAINS[result_stage(point).name]
