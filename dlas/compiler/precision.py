"""Whole-model float16 conversion of an imported model, with TVM's own tool.

`relax.transform.ToMixedPrecision` makes conv2d and matmul take float16 data and weights
(accumulating in `accumulate`), lets elementwise ops follow in float16, and keeps
reductions (e.g. global average pooling) in float32; the input stays float32 and is cast
on entry, the output is cast back to float32. Parameters become float16 function
inputs. Batch-norm is decomposed into elementwise ops first, so it follows the convs in
float16 instead of being cast around.
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from .relax_import import ImportedModel

FLOAT16_MAX = float(np.finfo(np.float16).max)


def convert_float16(imp: ImportedModel, accumulate: str = "float32") -> ImportedModel:
    """`imp` with its computation in float16; convs become (float16, float16, accumulate)."""
    if accumulate not in ("float16", "float32"):
        raise ValueError(f"accumulate must be float16 or float32, got {accumulate!r}")
    names = [n for n, v in imp.params.items() if v.dtype == np.float32]
    for name in names:
        peak = float(np.abs(imp.params[name]).max()) if imp.params[name].size else 0.0
        if peak > FLOAT16_MAX:
            raise ValueError(f"parameter '{name}' holds {peak:.3g}, beyond float16's range "
                             f"({FLOAT16_MAX:g}); it cannot be converted")
    mod = relax.transform.DecomposeOpsForInference()(imp.mod)
    mod = relax.transform.ToMixedPrecision(out_dtype=accumulate, fp16_input_names=names)(mod)
    params = {n: (v.astype(np.float16) if n in names else v) for n, v in imp.params.items()}
    return ImportedModel(mod, params, imp.input_shape, imp.input_dtype)
