"""The stage graph of a sweep point, as declared objects (`dlas.stages.base.Stage`).

    data -> train -> compress -> import -> compile -> measure
                                       \\-> baseline            (a baseline point)

One module per stage says what it reads, what its key hashes and what it produces (a typed
output, `dlas.stages.outputs`, with typed facts, `dlas.stages.facts`). Keys hash exactly
the inputs a stage's output depends on, so points sharing a prefix share its entries: one
trained model feeds every compression, one compressed model every algorithm and target.
`dlas.runner.executor` runs the graph.
"""

from __future__ import annotations

from dlas.stages.base import Stage
from dlas.stages.baseline import BASELINE
from dlas.stages.chains import (
    ALL,
    BY_NAME,
    CHAINS,
    RESULT_STAGES,
    STAGES,
    TIMED_STAGES,
    point_stages,
    result_stage,
)
from dlas.stages.compile import COMPILE
from dlas.stages.compress import COMPRESS
from dlas.stages.data import DATA
from dlas.stages.import_model import IMPORT
from dlas.stages.keys import KeyMemo, StageKeys, iter_stage_keys, stage_keys
from dlas.stages.measure import MEASURE
from dlas.stages.train import TRAIN

__all__ = ["ALL", "BASELINE", "BY_NAME", "CHAINS", "COMPILE", "COMPRESS", "DATA", "IMPORT",
           "KeyMemo", "MEASURE", "RESULT_STAGES", "STAGES", "TIMED_STAGES", "TRAIN", "Stage",
           "StageKeys", "iter_stage_keys", "point_stages", "result_stage", "stage_keys"]
