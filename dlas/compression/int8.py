"""int8 post-training static quantization with ONNX Runtime (the paper's int8 path).

The float model is exported to ONNX (torch's exporter, batch dimension dynamic so ONNX
Runtime can evaluate in batches), pre-processed (shape inference, Conv+BatchNorm folding)
and quantized by `onnxruntime.quantization.quantize_static` into a QDQ model:

* weights int8, symmetric, per output channel;
* activations int8, *symmetric* (`ActivationSymmetric`): every zero point is 0, so TVM can
  run each conv as a plain int8 x int8 -> int32 convolution (`dlas.compiler.quantized`)
  that computes exactly what the QDQ model specifies.

Calibrated: activation ranges are ONNX Runtime's MinMax calibration over a held-out slice
of the training set (`DatasetBundle.calibration`, served without augmentation).

Uncalibrated, as in the paper's Figure 3c, where int8 came first from TVM's native
conversion (`relay.quantize`, whose default `calibrate_mode="global_scale"` uses one
fixed range for every activation, `global_scale=8.0`) and calibration was then used "to
recover the accuracy": here every activation range is the fixed [-global_scale,
global_scale], given to ONNX Runtime as its calibration cache, so no data is looked at.
Weights are quantized the same way in both (their ranges need no data), which isolates
the effect of calibrating the activations.
"""

from __future__ import annotations

import logging
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dlas.datasets.base import DatasetBundle, fixed_batch

INPUT_NAME = "input"
OUTPUT_NAME = "logits"


def export_onnx(model: torch.nn.Module, input_shape: tuple[int, ...]) -> bytes:
    """The model (eval mode, float32) as ONNX with a dynamic batch dimension."""
    model = model.eval()
    example = torch.zeros((1, *input_shape), dtype=torch.float32)
    batch = torch.export.Dim("batch", min=1, max=4096)
    with torch.no_grad(), warnings.catch_warnings(), _quiet("torch.onnx"):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, (example,), dynamo=True, verbose=False, input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME], dynamic_shapes=({0: batch},),
        )
    return program.model_proto.SerializeToString()


def calibration_inputs(bundle: DatasetBundle, size: int, seed: int) -> tuple[np.ndarray, str]:
    """`size` calibration images (N, C, H, W) and where they came from.

    The dataset's own calibration slice if it has one, else a seeded slice of the
    training set (which may carry training augmentation).
    """
    if size < 1:
        raise ValueError(f"calibration_size must be >= 1, got {size}")
    if bundle.calibration is not None and len(bundle.calibration) > 0:  # type: ignore[arg-type]
        source, dataset = "calibration", bundle.calibration
    elif bundle.train is not None and len(bundle.train) > 0:  # type: ignore[arg-type]
        source, dataset = "train", bundle.train
    else:
        raise ValueError(f"dataset '{bundle.name}' has neither a calibration slice nor a "
                         "training split to calibrate int8 activations with; use "
                         "int8_uncalibrated or a dataset that provides one")
    n = min(size, len(dataset))  # type: ignore[arg-type]
    images = fixed_batch(dataset, n, seed=None if source == "calibration" else seed)
    return images.numpy().astype(np.float32), f"{source} ({n} images)"


def quantize_qdq(
    onnx_model: bytes,
    calibration: np.ndarray | None = None,
    *,
    global_scale: float | None = None,
    per_channel: bool = True,
) -> bytes:
    """Quantize an fp32 ONNX model to int8 QDQ with symmetric int8 activations.

    Pass `calibration` images (MinMax calibration) or `global_scale` (every activation
    range is [-global_scale, global_scale], no data), not both.
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quant_pre_process,
        quantize_static,
    )
    from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

    if (calibration is None) == (global_scale is None):
        raise ValueError("give either calibration images or a global_scale")
    if global_scale is not None and not global_scale > 0:
        raise ValueError(f"global_scale must be > 0, got {global_scale}")

    class Reader(CalibrationDataReader):
        def __init__(self, images: np.ndarray) -> None:
            self.batches = iter([{INPUT_NAME: images[i : i + 1]} for i in range(len(images))])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    with tempfile.TemporaryDirectory(prefix="dlas-int8-") as tmp, _quiet("root"):
        work = Path(tmp)
        (work / "fp32.onnx").write_bytes(onnx_model)
        quant_pre_process(str(work / "fp32.onnx"), str(work / "pre.onnx"))
        cache = None
        reader = None
        if global_scale is not None:
            cache = work / "ranges.json"
            bound = np.array(global_scale, dtype=np.float32)
            ranges = {name: (-bound, bound) for name in _activation_names(work / "pre.onnx")}
            save_tensors_data(TensorsData(CalibrationMethod.MinMax, ranges), cache)
        else:
            reader = Reader(np.ascontiguousarray(calibration, dtype=np.float32))
        quantize_static(
            str(work / "pre.onnx"), str(work / "int8.onnx"), reader,
            quant_format=QuantFormat.QDQ, per_channel=per_channel,
            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
            calibration_cache_path=str(cache) if cache is not None else None,
        )
        return (work / "int8.onnx").read_bytes()


def _activation_names(path: Path) -> list[str]:
    """Every non-constant tensor of the graph: the input and all node outputs."""
    import onnx

    graph = onnx.load(str(path)).graph
    constants = {init.name for init in graph.initializer}
    names = [i.name for i in graph.input if i.name not in constants]
    names += [out for node in graph.node for out in node.output if out]
    return names


class OrtModel:
    """An ONNX model in an ONNX Runtime CPU session."""

    def __init__(self, onnx_model: bytes, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        self.session = ort.InferenceSession(onnx_model, options,
                                            providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name

    def __call__(self, inputs: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(inputs, dtype=np.float32)
        return np.asarray(self.session.run(None, {self.input_name: x})[0], dtype=np.float32)

    def accuracy(self, dataset: Dataset, batch_size: int = 256) -> float:
        correct = seen = 0
        for x, y in _batches(dataset, batch_size):
            correct += int((self(x).argmax(axis=1) == y).sum())
            seen += len(y)
        if seen == 0:
            raise ValueError("cannot evaluate on an empty dataset")
        return correct / seen


def _batches(dataset: Dataset, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for x, y in DataLoader(dataset, batch_size=batch_size, num_workers=0):
        yield x.numpy(), torch.as_tensor(y).numpy()


class _quiet:
    """Silence a logger's warnings (ORT's pre-processing advice, exporter chatter)."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(None if name == "root" else name)

    def __enter__(self) -> None:
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        self.logger.setLevel(self.level)

