"""Stage `import`: the deployed form of the compressed model imported into TVM Relax,
with the outputs its compiled form must reproduce.

`reference.npz` holds the verification inputs, `outputs` (what the compiled model must
compute: PyTorch's output, or an int8 QDQ model's literal function) and `fp32_outputs`
(the float32 PyTorch model's, for the record).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlas.stages.base import Job, StoredStage
from dlas.stages.compress import COMPRESS
from dlas.stages.data import DATA
from dlas.stages.facts import ImportFacts
from dlas.stages.outputs import ImportedModule
from dlas.sweep.grid import Point

#: Data dtypes a conv of a model deployed in each precision is expected to read.
_CONV_DATA_DTYPES = {"float32": {"float32"}, "float16": {"float16"}, "int8": {"int8", "uint8"}}


def precision_fallbacks(dtypes: list[tuple[str, str, str]], precision: str) -> list[str]:
    """One note per conv that does not compute in the deployed precision (e.g. a conv of
    an int8 model that stayed a float conv), recorded beside the algorithm fallbacks."""
    expected = _CONV_DATA_DTYPES[precision]
    return [f"conv {i} (data, weight, out) = {d}: not {precision}; runs in {d[0]}"
            for i, d in enumerate(dtypes) if d[0] not in expected]


class ImportStage(StoredStage[ImportFacts, ImportedModule]):
    name = "import"
    #: 2: float16/int8 imports, ONNX Runtime reference; 3: convs outside the deployed
    #: precision noted; 4: batch norms folded into convs (torch.fx fuse).
    version = 4
    parent = "compress"
    parent_field = "compress"
    reads = ()  # the budgets only: the compressed model carries the rest
    needs = ("data", "compress")
    code = ("compiler",)
    libraries = ("torch", "apache-tvm", "apache-tvm-ffi")
    facts_type = ImportFacts

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return {"verify_samples": point.budgets.verify_samples}

    def compute(self, job: Job) -> ImportFacts:
        import torch

        from dlas.compiler.quantized import conv_dtypes
        from dlas.compiler.relax_import import import_torch_model, save_imported
        from dlas.datasets.base import fixed_batch

        bundle = job.inputs[DATA]
        compressed = job.inputs[COMPRESS]
        precision = compressed.facts.precision
        b = job.point.budgets
        input_shape = (1, *bundle.input_shape)
        inputs = fixed_batch(bundle.test, b.verify_samples, b.seed)
        with torch.no_grad():
            fp32_outputs = compressed.model(inputs).numpy()
        outputs, reference = fp32_outputs, "pytorch"
        int8_convs = output_step = None
        onnx_bytes = compressed.quantized_onnx()
        if precision == "int8":
            if onnx_bytes is None:
                raise ValueError(f"compression '{job.point.compression.name}' says int8 but "
                                 "stored no quantized ONNX model (QuantizedOnnx deployment)")
            from dlas.compiler.quantized import import_qdq_onnx
            from dlas.compiler.quantized import output_step as step_of
            from dlas.compression.int8 import literal_qdq

            imported, report = import_qdq_onnx(onnx_bytes, input_shape)
            int8_convs = report.as_dict()
            output_step = step_of(onnx_bytes)
            # the QDQ graph's own function, not whichever fused int8 kernels a runtime
            # picks on this CPU (dlas.compression.int8)
            outputs, reference = literal_qdq(onnx_bytes)(inputs.numpy()), "qdq"
        else:
            imported = import_torch_model(compressed.model, input_shape)
            deployment = compressed.facts.deployment
            if precision == "float16":
                from dlas.compiler.precision import convert_float16

                accumulate = deployment.accumulate if deployment else None
                imported = convert_float16(imported, accumulate or "float32")
        save_imported(imported, job.dir / "relax")
        np.savez(job.dir / "reference.npz", inputs=inputs.numpy(), outputs=outputs,
                 fp32_outputs=fp32_outputs)
        dtypes = conv_dtypes(imported.mod)
        return ImportFacts(
            input_shape=list(imported.input_shape), precision=precision, reference=reference,
            conv_dtypes=[list(d) for d in dtypes],
            precision_fallbacks=precision_fallbacks(dtypes, precision),
            int8_convs=int8_convs, output_step=output_step)

    def load(self, path: Path, facts: ImportFacts) -> ImportedModule:
        from dlas.compiler.relax_import import load_imported

        with np.load(path / "reference.npz") as ref:
            return ImportedModule(load_imported(path / "relax"), ref["inputs"], ref["outputs"],
                                  ref["fp32_outputs"], facts)


IMPORT = ImportStage()
