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

What the quantized model computes is its *literal QDQ semantics*: each QuantizeLinear /
DequantizeLinear and the float op between them, exactly as the ONNX graph says
(`literal_qdq`: ONNX Runtime with graph optimizations off, which runs every node as
written). That is the reference TVM's int8 variants are verified against, on every CPU.

ONNX Runtime as users run it (graph optimizations on) fuses each DQ-Conv-Q into a
QLinearConv. On x86 its int8 kernels shift s8 activations to u8 and, on CPUs without
VNNI, multiply with `pmaddubsw`, whose int16 sum of two u8 x s8 products saturates
(255 x 127 x 2 > 32767): those CPUs (AVX2, or AVX-512 without VNNI, e.g. AMD Zen 3)
compute a different function from the first quantized conv on. Measured here with the
CPU emulated without VNNI (qemu-x86_64 -cpu EPYC-Milan): one conv with x_q = 127 and
w_q = 127 gives 16 instead of 508; with 7-bit weights (`reduce_range`, |w_q| <= 64) the
pair sums fit and the fused model equals the literal one exactly. So `reduce_range`
defaults to `auto`: on when the CPU that quantizes (this host) lacks VNNI
(`choose_reduce_range`), recorded in the result and hashed into the compress key.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from dlas.datasets.base import DatasetBundle, fixed_batch

log = logging.getLogger(__name__)

INPUT_NAME = "input"
OUTPUT_NAME = "logits"

#: ONNX Runtime graph optimization levels by their short names.
GRAPH_OPTIMIZATION = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                      "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

ReduceRangeSetting = bool | Literal["auto"]


@dataclass(frozen=True)
class ReduceRangeChoice:
    """Whether weights are quantized to 7 bits, and why (recorded in the result)."""

    reduce_range: bool
    reason: str


def choose_reduce_range(setting: ReduceRangeSetting, cpu: dict | None = None) -> ReduceRangeChoice:
    """Resolve an int8 option's `reduce_range` for the CPU that runs ONNX Runtime.

    `auto`: on for an x86 CPU without VNNI, where ONNX Runtime's fused u8 x s8 kernels
    saturate int16 pair sums unless weights stay within 7 bits; off elsewhere (full 8-bit
    weights, no accuracy given away). `cpu` is `detect_host_cpu()`'s description
    (tests pass one to force either path).
    """
    from dlas.targets.host import detect_host_cpu, has_vnni, is_x86

    if setting != "auto":
        return ReduceRangeChoice(bool(setting), "set in the config")
    cpu = detect_host_cpu() if cpu is None else cpu
    if is_x86(cpu) and not has_vnni(cpu):
        return ReduceRangeChoice(True, "auto: this x86 CPU has no VNNI, so ONNX Runtime's "
                                       "u8 x s8 kernels saturate 8-bit weights' pair sums")
    return ReduceRangeChoice(False, "auto: " + ("this CPU has VNNI" if is_x86(cpu) else
                                                f"not x86 ({cpu.get('arch')}); the VNNI "
                                                "saturation does not apply"))


def int8_host_facts(setting: ReduceRangeSetting) -> dict[str, bool]:
    """What an int8 option's output depends on besides its parameters: the resolved
    `reduce_range` (part of the compress key, so a cache moved to a CPU that needs the
    other setting is not served)."""
    return {"reduce_range": choose_reduce_range(setting).reduce_range}


#: The ONNX model's metadata key naming the exporter that made it ("torchscript", "dynamo").
EXPORTER_KEY = "dlas.exporter"
#: What `export_onnx` does, as part of its memo's name (`export_memo`): a memo another
#: rule wrote (the dynamo exporter alone, before) is not served for this one.
EXPORT_RULE = "torchscript if it computes the module's function, else dynamo"


def export_onnx(model: torch.nn.Module, input_shape: tuple[int, ...]) -> bytes:
    """The model (eval mode, float32) as ONNX with a dynamic batch dimension, made by
    PyTorch's TorchScript exporter, or by its dynamo exporter where that one fails; which
    one is in the model's metadata (`exporter_of`).

    Why TorchScript first: on torch 2.13 it exports a quickstart model in 0.1-0.25 s
    (0.2-0.4 s with the check below), where the dynamo exporter takes 2.0-3.8 s, and
    3.7-4.1 s as a process's first export (Zen 4; 5-11 s on a Zen 1). That export runs
    in a timing worker, every core but one idle, in the first pass of every ONNX Runtime
    point. The two graphs compute the same function and differ where the model pools
    (GlobalAveragePool + Flatten against ReduceMean + Reshape); ONNX Runtime ran the two
    exports of ResNet18-w0.5 and MobileNetV2-w0.5 at 16x16 and 32x32 within 2% of each
    other (`benchmarks/onnx_export.py`, through the baseline's own timing path). A
    TorchScript export that computes another function than the module (`_differs`) is
    not used."""
    model = model.eval()
    example = torch.zeros((1, *input_shape), dtype=torch.float32)
    try:
        data = _export_torchscript(model, example)
        why = _differs(model, data, input_shape)
    except Exception as exc:  # noqa: BLE001 - any exporter failure: the other exporter
        why = f"{type(exc).__name__}: {exc}"
    if why is None:
        return _with_exporter(data, "torchscript")
    log.info("TorchScript ONNX export not used (%s); using the dynamo exporter", why)
    return _with_exporter(_export_dynamo(model, example), "dynamo")


def _differs(model: torch.nn.Module, data: bytes, input_shape: tuple[int, ...]) -> str | None:
    """Why the TorchScript export does not compute the module's function, or None.

    Why check: that exporter traces, so Python control flow that depends on the input
    is recorded for the example it traced (zeros), where the dynamo exporter captures it
    or fails. So the export runs on a random batch of two (the dynamic batch too) in ONNX
    Runtime, beside the module: 0.1-0.2 s for a quickstart model."""
    import onnxruntime as ort

    x = torch.randn((2, *input_shape), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(x).numpy()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    got = session.run(None, {INPUT_NAME: x.numpy()})[0]
    if got.shape != expected.shape:
        return f"its output has shape {got.shape}, the module's {expected.shape}"
    scale = max(1.0, float(np.abs(expected).max()))
    worst = float(np.abs(got - expected).max())
    if not worst <= 1e-3 * scale:
        return f"its output differs from the module's by up to {worst:.3g}"
    return None


def _export_torchscript(model: torch.nn.Module, example: torch.Tensor) -> bytes:
    import io

    out = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings(), _quiet("torch.onnx"):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), out, dynamo=False, input_names=[INPUT_NAME],
                          output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    return out.getvalue()


def _export_dynamo(model: torch.nn.Module, example: torch.Tensor) -> bytes:
    batch = torch.export.Dim("batch", min=1, max=4096)
    with torch.no_grad(), warnings.catch_warnings(), _quiet("torch.onnx"):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, (example,), dynamo=True, verbose=False, input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME], dynamic_shapes=({0: batch},),
        )
    return program.model_proto.SerializeToString()


def _with_exporter(data: bytes, exporter: str) -> bytes:
    import onnx

    proto = onnx.load_model_from_string(data)
    entry = proto.metadata_props.add()
    entry.key, entry.value = EXPORTER_KEY, exporter
    return proto.SerializeToString()


def exporter_of(data: bytes) -> str | None:
    """The exporter `export_onnx` recorded in an ONNX model; None when it says none."""
    import onnx

    proto = onnx.load_model_from_string(data)
    return next((p.value for p in proto.metadata_props if p.key == EXPORTER_KEY), None)


#: The cache's folder of ONNX exports kept across timing runs (not a stage: a memo).
EXPORTS_DIR = "onnx-exports"


def export_memo(cache_root: Path | None, model: torch.nn.Module,
                input_shape: tuple[int, ...]) -> Path | None:
    """Where the float32 ONNX export of a compressed model is kept: named by what the
    export depends on, the module's structure and weights, the input shape and torch's
    version (the exporter)."""
    if cache_root is None:
        return None
    import hashlib

    digest = hashlib.sha256(repr(model).encode())
    digest.update(repr(tuple(input_shape)).encode())
    digest.update(EXPORT_RULE.encode())
    for name, tensor in model.state_dict().items():
        digest.update(f"{name} {tuple(tensor.shape)} {tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
                      .numpy().tobytes())
    name = f"{digest.hexdigest()[:24]}-torch{torch.__version__}.onnx"
    return cache_root / EXPORTS_DIR / name


def export_onnx_memo(model: torch.nn.Module, input_shape: tuple[int, ...],
                     memo: Path | None) -> bytes:
    """`export_onnx`, kept in the file `memo` (None: not kept). An export took 5-11 s per
    quickstart model on a Zen 1 with the dynamo exporter (0.2 s on a Zen 4 with the
    TorchScript one), paid again by every timing run of an ONNX Runtime point; the memo
    is named by what the export depends on (`export_memo`), so it is read, not
    recomputed. A damaged memo is exported again and replaced."""
    kept = _whole_model(memo) if memo is not None else None
    if kept is not None:
        return kept
    exported = export_onnx(model, input_shape)
    if memo is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        partial = memo.with_name(f".{memo.name}.{os.getpid()}.writing")
        partial.write_bytes(exported)
        os.replace(partial, memo)  # whole or absent, whoever reads it
    return exported


def _whole_model(memo: Path) -> bytes | None:
    """The memo's bytes if they are a whole ONNX model; None if there is no memo or it is
    damaged (cut short, overwritten: a model cut short loses the opset imports, which
    come after its graph, and fails the checker)."""
    import onnx

    try:
        data = memo.read_bytes()
    except FileNotFoundError:
        return None
    try:
        onnx.checker.check_model(onnx.load_model_from_string(data))
    except Exception as exc:  # noqa: BLE001 - any parse or check failure: not usable
        log.warning("ONNX export memo %s is damaged (%s: %s); exporting again", memo,
                    type(exc).__name__, exc)
        return None
    return data


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
    reduce_range: bool = False,
) -> bytes:
    """Quantize an fp32 ONNX model to int8 QDQ with symmetric int8 activations.

    Pass `calibration` images (MinMax calibration) or `global_scale` (every activation
    range is [-global_scale, global_scale], no data), not both. `reduce_range` quantizes
    weights to 7 bits ([-64, 64]; see the module doc for when that is needed).
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
            quant_format=QuantFormat.QDQ, per_channel=per_channel, reduce_range=reduce_range,
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
    """An ONNX model in an ONNX Runtime CPU session (graph optimizations as users run it:
    all, unless `graph_optimization` says otherwise)."""

    def __init__(self, onnx_model: bytes, threads: int | None = None,
                 graph_optimization: str = "all") -> None:
        import onnxruntime as ort

        if graph_optimization not in GRAPH_OPTIMIZATION:
            raise ValueError(f"unknown graph_optimization {graph_optimization!r}; known: "
                             f"{', '.join(GRAPH_OPTIMIZATION)}")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                   GRAPH_OPTIMIZATION[graph_optimization])
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


def literal_qdq(onnx_model: bytes) -> OrtModel:
    """The quantized model's own function: every QuantizeLinear, DequantizeLinear and float
    op evaluated as the graph writes it (no fusion into a runtime's int8 kernels, which
    differ between CPUs). What TVM's int8 variants are verified against."""
    return OrtModel(onnx_model, graph_optimization="disabled")


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

