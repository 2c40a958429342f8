"""Constant folding in numpy, before legalization: no kernel build per constant.

Once parameters are bound, a model holds many small constant subexpressions: the
decomposed batch-norm's `sqrt(var + eps)` and the `expand_dims` of its four vectors, a
linear layer's transposed weight, an int8 bias's `dequantize`, float16's `astype` of the
buffers it did not convert. TVM's `relax.transform.FoldConstant` folds each of them by
building, loading and running a TVM kernel; on a 2-core machine that was 16-18 s of a
~25 s compile of MobileNetV2 (width 0.5), three quarters of the compile.

`fold_constants` evaluates them with numpy instead, in microseconds each, on the
high-level Relax module (before `LegalizeOps`), so the legalized module has the same
call_tir graph and the same constants TVM's fold would have produced. It is exact by
construction, not by tolerance: it folds only ops whose numpy evaluation is the same
IEEE computation TVM's kernel performs (layout ops that move values; add, subtract,
multiply, divide and sqrt, which IEEE rounds correctly in float32 and float64, and in
float16 through float32, whose double rounding is innocuous for these ops; casts round to
nearest even in both; `dequantize` as TVM legalizes it). Transcendental functions
(exp, tanh, ...) are not folded here: numpy's vectorized versions and LLVM's libm calls
may differ in the last bit. Whatever it leaves, including any op it does not know, TVM's
`FoldConstant` still folds after legalization (`lower_to_tir` keeps it), so nothing that
was folded before stays unfolded now; `FoldReport` counts both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import ir, relax

from .relax_values import static_shape

#: A numpy evaluation of one relax op: (call, argument values) -> value, or None when it
#: cannot be done exactly for these arguments (then the call is left for TVM to fold).
Evaluator = Callable[[relax.Call, list[Any]], np.ndarray | None]

_FLOATS = frozenset({"float16", "float32", "float64"})


@dataclass
class FoldReport:
    """Which constant subexpressions were folded, and by whom."""

    #: op name -> calls evaluated with numpy.
    numpy: Counter = field(default_factory=Counter)
    #: op name -> constant calls numpy left for TVM's FoldConstant (a kernel build each).
    left_to_tvm: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"numpy": dict(self.numpy), "left_to_tvm": dict(self.left_to_tvm)}


def _out_shape(call: relax.Call) -> tuple[int, ...] | None:
    return static_shape(call.ty)


def _reshaped(call: relax.Call, args: list[Any]) -> np.ndarray | None:
    """expand_dims, squeeze, reshape, flatten: the values in order, in the result shape."""
    shape = _out_shape(call)
    return None if shape is None else np.reshape(args[0], shape)


def _permute(call: relax.Call, args: list[Any]) -> np.ndarray:
    axes = call.attrs.axes
    return np.transpose(args[0], None if axes is None else [int(a) for a in axes])


def _broadcast(call: relax.Call, args: list[Any]) -> np.ndarray | None:
    shape = _out_shape(call)
    return None if shape is None else np.broadcast_to(args[0], shape)


def _astype(call: relax.Call, args: list[Any]) -> np.ndarray | None:
    dtype = str(call.attrs.dtype)
    src = str(args[0].dtype)
    # float -> int casts of out-of-range values are undefined in LLVM; leave them to TVM
    if src in _FLOATS and dtype not in _FLOATS:
        return None
    with np.errstate(all="ignore"):  # float16 overflow is inf, as in the kernel
        return args[0].astype(dtype)


def _binary(ufunc: np.ufunc, floats_only: bool) -> Evaluator:
    def evaluate(call: relax.Call, args: list[Any]) -> np.ndarray | None:
        a, b = args
        if a.dtype != b.dtype or (floats_only and str(a.dtype) not in _FLOATS):
            return None  # mixed dtypes or integer division: TVM's own rules
        with np.errstate(all="ignore"):  # inf/nan propagate as in the kernel
            return ufunc(a, b)

    return evaluate


def _unary_float(ufunc: np.ufunc) -> Evaluator:
    def evaluate(call: relax.Call, args: list[Any]) -> np.ndarray | None:
        if str(args[0].dtype) not in _FLOATS:
            return None
        with np.errstate(all="ignore"):
            return ufunc(args[0])

    return evaluate


def _dequantize(call: relax.Call, args: list[Any]) -> np.ndarray | None:
    """TVM's legalization (`legalize_ops/qdq.py`): float32(int32(x) - zp) * float32(scale),
    then clipped and cast for a float16 output."""
    data, scale, zero_point = args
    out_dtype = str(call.attrs.out_dtype)
    if out_dtype not in ("float32", "float16") or str(data.dtype) in _FLOATS:
        return None
    axis = int(call.attrs.axis) % data.ndim

    def along_axis(values: np.ndarray) -> np.ndarray:
        if values.size == 1:
            return values.reshape(())
        shape = [1] * data.ndim
        shape[axis] = values.size
        return values.reshape(shape)

    shifted = data.astype(np.int32) - along_axis(zero_point).astype(np.int32)
    out = shifted.astype(np.float32) * along_axis(scale).astype(np.float32)
    if out_dtype == "float16":
        limit = np.float32(np.finfo(np.float16).max)
        out = np.clip(out, -limit, limit).astype(np.float16)
    return out


#: The ops folded in numpy (see the module docstring for why exactly these).
EVALUATORS: dict[str, Evaluator] = {
    "relax.expand_dims": _reshaped,
    "relax.squeeze": _reshaped,
    "relax.reshape": _reshaped,
    "relax.flatten": _reshaped,
    "relax.permute_dims": _permute,
    "relax.broadcast_to": _broadcast,
    "relax.astype": _astype,
    "relax.add": _binary(np.add, floats_only=False),
    "relax.subtract": _binary(np.subtract, floats_only=False),
    "relax.multiply": _binary(np.multiply, floats_only=False),
    "relax.divide": _binary(np.divide, floats_only=True),
    "relax.sqrt": _unary_float(np.sqrt),
    "relax.negative": _unary_float(np.negative),
    "relax.dequantize": _dequantize,
}


def _value(expr: relax.Expr) -> Any:
    """The numpy value of a constant argument, a ShapeExpr's ints, or None."""
    if isinstance(expr, ir.GenericConst) and isinstance(expr.value, tvm.runtime.Tensor):
        return expr.value.numpy()
    if isinstance(expr, relax.ShapeExpr):
        values = [getattr(v, "value", None) for v in expr.values]
        return None if any(v is None for v in values) else tuple(int(v) for v in values)
    return None


def _is_constant_arg(expr: relax.Expr) -> bool:
    """True for an argument known at compile time (what TVM's fold would also treat so)."""
    if isinstance(expr, relax.Tuple):
        return all(_is_constant_arg(f) for f in expr.fields)
    return isinstance(expr, ir.GenericConst | relax.ShapeExpr)


@relax.expr_functor.mutator
class _NumpyFolder(relax.PyExprMutator):
    """Replaces constant calls of `EVALUATORS`' ops by their values; uses of a variable
    bound to a constant see the constant, so chains (expand_dims -> add -> sqrt) fold."""

    def __init__(self, mod: tvm.IRModule, report: FoldReport) -> None:
        super().__init__(mod)
        self.report = report

    def _constant_of(self, var: relax.Var) -> relax.Expr:
        new = super().visit_var_(var) if not isinstance(var, relax.DataflowVar) \
            else super().visit_dataflow_var_(var)
        bound = self.lookup_binding(new)
        return bound if isinstance(bound, ir.GenericConst) else new

    def visit_var_(self, op: relax.Var) -> relax.Expr:
        return self._constant_of(op)

    def visit_dataflow_var_(self, op: relax.DataflowVar) -> relax.Expr:
        return self._constant_of(op)

    def visit_call_(self, op: relax.Call) -> relax.Expr:
        call = super().visit_call_(op)
        if not isinstance(call.op, ir.Op) or not call.args \
                or not all(_is_constant_arg(a) for a in call.args):
            return call
        name = call.op.name
        evaluate = EVALUATORS.get(name)
        args = [_value(a) for a in call.args]
        value = None
        if evaluate is not None and all(a is not None for a in args):
            value = evaluate(call, args)
        dtype = str(getattr(call.ty, "dtype", ""))
        if value is None or tuple(value.shape) != _out_shape(call) or str(value.dtype) != dtype:
            if not name.startswith("relax.call"):  # call_tir & co. are TVM's own business
                self.report.left_to_tvm[name] += 1
            return call
        self.report.numpy[name] += 1
        return relax.const(np.ascontiguousarray(value), dtype)


def fold_constants(mod: tvm.IRModule) -> tuple[tvm.IRModule, FoldReport]:
    """`mod` with the constant subexpressions numpy evaluates exactly folded (see the
    module docstring), dead bindings removed, and what was and was not folded."""
    report = FoldReport()
    folder = _NumpyFolder(mod, report)
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gvar, folder.visit_expr(func))
    out = folder.builder_.get()
    if report.numpy:
        out = relax.transform.DeadCodeElimination()(out)
    return out, report
