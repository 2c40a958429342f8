"""Stage `data`: the dataset option's train/test bundle (layer 1).

Not stored: a dataset is its own cache on disk, and a bundle is cheap to rebuild in each
process. It fails here, before any training, when the test split cannot hold the
verification inputs.
"""

from __future__ import annotations

from typing import Any

from dlas.stages.base import StageEnv, TransientStage
from dlas.sweep.grid import Point


class DataStage(TransientStage[Any]):
    name = "data"
    version = 1
    parent = None
    reads = ("datasets",)
    code = ("datasets",)
    libraries = ("scikit-learn", "numpy")

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return {"dataset": point.datasets.identity(), "seed": point.budgets.seed}

    def build(self, point: Point, env: StageEnv) -> Any:
        choice = point.datasets
        bundle = choice.option.fn(choice.params, seed=point.budgets.seed)
        check_verify_samples(bundle, point.budgets.verify_samples)
        return bundle


def check_verify_samples(bundle: Any, verify_samples: int) -> None:
    """Fail at the data stage, before any training, when the test split is too small for
    the verification inputs (it would fail only at import, after training)."""
    size = len(bundle.test)
    if verify_samples > size:
        raise ValueError(f"budgets.verify_samples is {verify_samples}, but dataset "
                         f"'{bundle.name}' has only {size} test images: set "
                         f"budgets.verify_samples to at most {size}")


DATA = DataStage()
