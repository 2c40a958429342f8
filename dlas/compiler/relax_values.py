"""What a Relax expression is known to be at compile time: its static shape, its value.

The passes that rewrite the high-level model (constant folding, the layout pass, the
conv legalizer) all ask these two questions of an expression; they live here once.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import ir, relax, tirx


def static_shape(ty: object) -> tuple[int, ...] | None:
    """The static shape of a relax tensor type, or None if any dimension is symbolic."""
    shape = getattr(ty, "shape", None)
    if shape is None:
        return None
    dims = []
    for dim in shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        dims.append(int(dim.value))
    return tuple(dims)


def constant_value(expr: relax.Expr) -> np.ndarray | None:
    """The numpy value of a bound relax constant, None for anything else."""
    if isinstance(expr, ir.GenericConst) and isinstance(expr.value, tvm.runtime.Tensor):
        return expr.value.numpy()
    return None
