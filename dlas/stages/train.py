"""Stage `train`: the model option's module trained on the dataset (layer 2).

A "pretrained" model option's module is used as built. Accuracy is the test accuracy, or
None for a pretrained option whose module says its real weights were not loaded
(`dlas_pretrained` false): a number for random weights would be mistaken for a result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlas.stages.base import Job, Resources, StoredStage, option_facts
from dlas.stages.data import DATA
from dlas.stages.facts import TrainFacts
from dlas.stages.outputs import TrainedModel
from dlas.sweep.grid import Point

#: Model-option tag: the option returns a ready (pretrained) model that is not trained.
PRETRAINED_TAG = "pretrained"


def is_pretrained(point: Point) -> bool:
    return PRETRAINED_TAG in point.models.tags


def pretrained_weights(point: Point) -> Any:
    """What a pretrained model option says its output depends on besides its parameters
    (`key_facts`: e.g. the checkpoint file it would load), or None."""
    facts = point.models.option.key_facts
    return facts(point.models.params) if facts is not None else None


def fit_settings(job: Job, what: str) -> Any:
    """Training settings of a train or fine-tune job: the sweep's budgets, checkpoints in
    the entry's scratch folder (an interrupted run resumes from its last epoch)."""
    from dlas.models.training import FitSettings

    b = job.point.budgets
    return FitSettings(batch_size=b.batch_size, data_fraction=b.data_fraction, seed=b.seed,
                       checkpoint_dir=job.scratch(), progress=job.env.progress,
                       on_epoch=job.env.console.epoch_reporter(what),
                       precision=fit_precision(b))


def fit_precision(budgets: Any) -> str:
    """The precision this machine trains and fine-tunes in for `budgets`
    (`dlas.models.train_precision.resolve`)."""
    from dlas.models.train_precision import resolve

    return resolve(budgets.train_precision)


def precision_key(budgets: Any) -> dict[str, str]:
    """The key entry of a fit's precision: none for float32, so the keys of every float32
    model stay what they were before the choice existed."""
    precision = fit_precision(budgets)
    return {} if precision == "float32" else {"precision": precision}


class TrainStage(StoredStage[TrainFacts, TrainedModel]):
    name = "train"
    version = 1
    parent = "data"
    parent_field = "data"
    reads = ("models",)
    needs = ("data",)
    code = ("models",)  # the data code is in the data key it chains
    libraries = ("torch", "pytorch-lightning")
    facts_type = TrainFacts
    resources = Resources(cpus=2)

    def key_inputs(self, point: Point) -> dict[str, Any]:
        b = point.budgets
        if is_pretrained(point):
            return {"model": point.models.identity(), "weights": pretrained_weights(point)}
        training = {"epochs": b.epochs, "data_fraction": b.data_fraction,
                    "batch_size": b.batch_size, "max_lr": b.max_lr,
                    **precision_key(b), **option_facts(point.models)}
        return {"model": point.models.identity(), **training}

    def compute(self, job: Job) -> TrainFacts:
        import torch

        from dlas.models.macs import count_macs, count_params
        from dlas.models.training import evaluate, train_model

        bundle = job.inputs[DATA]
        b = job.point.budgets
        choice = job.point.models
        torch.manual_seed(b.seed)
        model = choice.option.fn(choice.params, num_classes=bundle.num_classes,
                                 input_shape=bundle.input_shape)
        history: list[dict[str, Any]] = []
        weights_loaded = None
        if is_pretrained(job.point):
            weights_loaded = bool(getattr(model, "dlas_pretrained", False))
        elif b.epochs > 0:
            result = train_model(model, bundle, b.epochs, max_lr=b.max_lr,
                                 settings=fit_settings(job, "train"))
            model, history = result.model, result.history
        model.eval()
        accuracy = None if weights_loaded is False else evaluate(model, bundle.test)
        torch.save(model, job.dir / "model.pt")
        return TrainFacts(accuracy=accuracy, params=count_params(model),
                          macs=count_macs(model, bundle.input_shape), history=history,
                          pretrained=weights_loaded is not None, weights_loaded=weights_loaded,
                          fit_precision=fit_precision(b) if b.epochs > 0 else "float32")

    def load(self, path: Path, facts: TrainFacts) -> TrainedModel:
        import torch

        return TrainedModel(torch.load(path / "model.pt", weights_only=False).eval(), facts)


TRAIN = TrainStage()
