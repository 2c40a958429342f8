"""Stage `compress`: the compression option applied to the trained model (layer 3).

It stores the compressed PyTorch module and, for int8, the quantized ONNX model. Accuracy
here is PyTorch's for float32 results. A reduced-precision result is only what it computes
once deployed, so its accuracy is measured in the runtime that runs it (measure and
baseline stages); int8 also gets ONNX Runtime's accuracy on the same QDQ model.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from dlas.stages.base import Job, Resources, StoredStage, option_facts
from dlas.stages.data import DATA
from dlas.stages.facts import CompressFacts, Deployment
from dlas.stages.outputs import CompressedModel
from dlas.stages.train import TRAIN, fit_settings, precision_key
from dlas.sweep.grid import Point

#: File name of an int8 model's quantized ONNX in its compress-stage entry.
QUANTIZED_ONNX = "model_int8.onnx"


class CompressStage(StoredStage[CompressFacts, CompressedModel]):
    name = "compress"
    #: 2: precision/deployment (int8 ONNX), accuracy None when unavailable or measured
    #: later. (int8's change of verification reference came with its key facts.)
    version = 2
    parent = "train"
    parent_field = "train"
    reads = ("compression",)
    needs = ("data", "train")
    code = ("compression",)  # the model code is in the train key it chains
    libraries = ("torch", "torch-pruning", "onnx", "onnxruntime", "onnxscript")
    facts_type = CompressFacts
    resources = Resources(cpus=2)

    def key_inputs(self, point: Point) -> dict[str, Any]:
        b = point.budgets
        return {"compression": point.compression.identity(),
                "finetune_epochs": b.finetune_epochs, "data_fraction": b.data_fraction,
                "batch_size": b.batch_size, "finetune_lr": b.finetune_lr,
                **precision_key(b), **option_facts(point.compression)}

    def compute(self, job: Job) -> CompressFacts:
        import torch

        from dlas.compression.base import CompressionContext, Float16Conversion, QuantizedOnnx
        from dlas.compression.pruning import conv_sparsity
        from dlas.models.macs import count_macs, count_params
        from dlas.models.training import evaluate, fine_tune

        point, tmp = job.point, job.dir
        bundle = job.inputs[DATA]
        trained = job.inputs[TRAIN]
        dense_accuracy = trained.facts.accuracy
        b = point.budgets
        choice = point.compression
        settings = fit_settings(job, "fine-tune")
        ctx_bundle = with_train_split_check(bundle, point)
        ctx = CompressionContext(
            bundle=ctx_bundle, budgets=b, dense_accuracy=dense_accuracy,
            fit_settings=settings,
            evaluate=lambda m: evaluate(m, bundle.test),
            fine_tune=lambda m, epochs: fine_tune(m, ctx_bundle, epochs, lr=b.finetune_lr,
                                                  settings=settings).model,
            model_name=point.models.name,
        )
        result = choice.option.fn(choice.params, copy.deepcopy(trained.model), ctx)
        for warning in result.warnings:
            job.env.console.note(f"{choice.label}: {warning}")
        if result.warnings:
            result.info["warnings"] = list(result.warnings)
        model = result.model.eval()
        torch.save(model, tmp / "model.pt")
        size = (tmp / "model.pt").stat().st_size
        accuracy = ort_accuracy = None
        deployment = None
        if isinstance(result.deployment, QuantizedOnnx):
            from dlas.compression.int8 import OrtModel

            (tmp / QUANTIZED_ONNX).write_bytes(result.deployment.model)
            size = len(result.deployment.model)
            if dense_accuracy is not None:
                ort_accuracy = OrtModel(result.deployment.model).accuracy(bundle.test)
            deployment = Deployment(onnx=QUANTIZED_ONNX)
        elif isinstance(result.deployment, Float16Conversion):
            size = float16_size(model)
            deployment = Deployment(accumulate=result.deployment.accumulate)
        elif dense_accuracy is not None:
            accuracy = evaluate(model, bundle.test)
        return CompressFacts(
            info=result.info, precision=result.precision, accuracy=accuracy,
            ort_accuracy=ort_accuracy, dense_accuracy=dense_accuracy,
            params=count_params(model),
            nonzero_params=int(sum(int(torch.count_nonzero(p)) for p in model.parameters())),
            macs=count_macs(model, bundle.input_shape), sparsity=conv_sparsity(model),
            size_bytes=size, deployment=deployment)

    def load(self, path: Path, facts: CompressFacts) -> CompressedModel:
        import torch

        model = torch.load(path / "model.pt", weights_only=False).eval()
        return CompressedModel(model, facts, path)


def float16_size(model: Any) -> int:
    """Bytes of the model saved with float16 weights (what a float16 deployment stores)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(copy.deepcopy(model).half().state_dict(), buffer)
    return buffer.getbuffer().nbytes


class MissingSplit:
    """Stands in for a training split a dataset does not have: any use says so."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __len__(self) -> int:
        raise RuntimeError(self.message)

    def __getitem__(self, index: int) -> Any:
        raise RuntimeError(self.message)


def with_train_split_check(bundle: Any, point: Point) -> Any:
    """The bundle, or for a dataset without training images one whose `train` raises a
    clear error when a compression tries to fine-tune or calibrate on it."""
    train = bundle.train
    try:
        missing = train is None or len(train) == 0
    except Exception:  # a split that raises its own error on use explains itself
        missing = False
    if not missing:
        return bundle
    message = (f"dataset '{bundle.name}' has no training split: compression "
               f"'{point.compression.name}' cannot fine-tune (or calibrate) the model "
               f"'{point.models.name}' on it; set budgets.finetune_epochs: 0, or use a "
               "dataset with training images")
    return dataclasses.replace(bundle, train=MissingSplit(message))


COMPRESS = CompressStage()
