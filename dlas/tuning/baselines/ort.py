"""ONNX Runtime as a baseline: CPU execution provider, intra-op threads matched, one
inter-op thread, sequential execution.

The model it runs is the point's deployed function: for int8 the very QDQ model the
compress stage quantized (and TVM is verified against); for float32 the compressed module
exported to ONNX as the int8 path exports it; for float16 that export converted to
float16 (inputs and outputs stay float32). ONNX Runtime's CPU provider computes float16
nodes that lack a float16 kernel in float32 (its cast-insertion pass), as a user of it
would get.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from dlas.tuning.baselines.base import BaselineModel, BaselineNotRunnable, Peer

ONNX_FILE = "model.onnx"


def onnx_model(model: BaselineModel) -> tuple[bytes, str]:
    """The ONNX model ONNX Runtime runs for this point, and what it is."""
    from dlas.compression.int8 import export_memo, export_onnx_memo, exporter_of

    if model.precision == "int8":
        if model.quantized_onnx is None:
            raise BaselineNotRunnable("an int8 point without the compress stage's quantized "
                                      "ONNX model: nothing to give ONNX Runtime")
        return model.quantized_onnx, "int8 QDQ model from the compress stage"
    if model.precision not in ("float32", "float16"):
        raise BaselineNotRunnable(f"no ONNX Runtime path for {model.precision} models")
    memo = export_memo(model.export_cache, model.model, model.input_shape)
    exported = export_onnx_memo(model.model, model.input_shape, memo)
    if model.precision == "float32":
        by = exporter_of(exported)
        return exported, ("float32 ONNX export of the compressed model"
                          + (f" ({by} exporter)" if by else ""))
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        half = convert_float_to_float16(onnx.load_from_string(exported), keep_io_types=True)
    return half.SerializeToString(), "float16 conversion of the float32 ONNX export"


class OrtPeer(Peer):
    runtime = "onnxruntime"

    def __init__(self, model: BaselineModel, graph_optimization: str = "all") -> None:
        import onnxruntime as ort

        from dlas.compression.int8 import GRAPH_OPTIMIZATION

        data, self.source = onnx_model(model)
        if model.work_dir is not None:
            (model.work_dir / ONNX_FILE).write_bytes(data)
        options = ort.SessionOptions()
        options.intra_op_num_threads = model.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                                   GRAPH_OPTIMIZATION[graph_optimization])
        options.log_severity_level = 3
        if model.cpus and len(model.cpus) == model.threads and model.threads > 1:
            # ONNX Runtime pins its pool threads (1-based processor ids, one entry per
            # thread beyond the caller's, which the timing worker has pinned itself)
            options.add_session_config_entry(
                "session.intra_op_thread_affinities",
                ";".join(str(c + 1) for c in model.cpus[1:]))
        self.cpus = model.cpus
        self.graph_optimization = graph_optimization
        self.session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name
        self.threads = model.threads
        self.precision = model.precision
        self.reduce_range = model.info.get("reduce_range")

    def run(self, inputs: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(inputs, dtype=np.float32)
        out = self.session.run([self.output_name], {self.input_name: x})[0]
        return np.asarray(out, dtype=np.float32)

    def bind(self, x: np.ndarray) -> Callable[[], object]:
        binding = self.session.io_binding()
        binding.bind_cpu_input(self.input_name, np.ascontiguousarray(x, dtype=np.float32))
        binding.bind_output(self.output_name)
        session = self.session

        def call() -> object:
            return session.run_with_iobinding(binding)

        return call

    def mismatch_hint(self) -> str | None:
        from dlas.targets.host import detect_host_cpu, has_vnni, is_x86

        cpu = detect_host_cpu()
        if (self.precision == "int8" and self.reduce_range is False and is_x86(cpu)
                and not has_vnni(cpu) and self.graph_optimization != "disabled"):
            return ("this CPU has no VNNI, where ONNX Runtime's fused int8 convs saturate "
                    "8-bit weights; quantize with reduce_range: true (its default, auto, "
                    "does so on such CPUs)")
        return None

    def info(self) -> dict[str, Any]:
        import onnxruntime as ort

        return {"runtime": self.runtime, "version": ort.__version__,
                "providers": self.session.get_providers(), "model": self.source,
                "precision": self.precision, "onnx": ONNX_FILE,
                "threads": self.threads, "inter_op_threads": 1, "execution_mode": "sequential",
                "graph_optimization": self.graph_optimization, "pinned_cpus": self.cpus}
