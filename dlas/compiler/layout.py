"""One activation layout across the graph: the model rewritten into NHWC or NCHWc.

An algorithm computed in a vector layout (`dlas.tir.layout`) pays off only if the data
stays in that layout between convolutions: reordering before and after every conv would
cost about as much as the conv saves. So, before legalization, `convert_layout` rewrites
the model's Relax graph (as ONNX Runtime's NCHWc transformer and TVM's old AlterOpLayout
did):

* every conv the algorithm computes in the layout (plain and depthwise convs with a
  constant weight) becomes a `relax.nn.conv2d` with `data_layout`/`out_layout` set to it
  and its weight padded with zeros to NCHWc's whole channel blocks (the algorithm packs it
  at compile time, once);
* ops that have a form in the layout follow their input into it: elementwise ops
  (bias, batch-norm, ReLU, clip, residual add, per-tensor (de)quantization, ...), whose
  constant operands are stored in the layout here, in numpy; max/average pooling; the
  global average pool (a mean over H and W);
* everything else (the flatten before the classifier, a grouped conv, ...) gets its
  input reordered back to NCHW, once per value, and the model's outputs are NCHW;
* an elementwise op with operands in both forms stays in NCHW where that costs fewer
  reorders, counting those its result's convs will need (`_stays_nchw`): behind
  sparse convs kept in NCHW, the residual path follows them instead of bouncing into
  the layout and back; and a conv between convs kept in NCHW stays NCHW where the
  algorithm computes it so (`_between_nchw`).

Reorders are therefore only at the model's edges, around ops with no form in the layout,
and where a conv the algorithm keeps in NCHW meets one in the layout; `LayoutReport`
counts them and says where they are.

NCHWc's padded lanes hold finite values no real output reads: padded weights are zero,
elementwise constants are padded with 0 (1 for a divisor), and reorders to NCHW drop
them. A conv whose input has fewer channels than a block (the image) reads its NCHW input
directly and writes NCHWc, as MLAS does, instead of padding 3 channels to 8 or 16.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import ir, relax, te, tirx

from ..tir.conv_spec import ConvSpec
from ..tir.layout import NCHW, DataLayout
from .relax_values import constant_value, static_shape

#: Why a conv keeps NCHW (None: it takes the layout): asked with the conv's spec in it and
#: its (unpadded OIHW) weight.
ConvReason = Callable[[ConvSpec, np.ndarray], str | None]

#: Elementwise ops with one tensor operand that map finite values to finite values.
UNARY_OPS = frozenset({
    "relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu",
    "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.astype",
    "relax.negative", "relax.abs", "relax.square",
})
#: Elementwise ops with two (broadcasting) operands; divide pads its constant with 1.
BINARY_OPS = frozenset({
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum",
})
POOL_OPS = frozenset({"relax.nn.max_pool2d", "relax.nn.avg_pool2d"})
#: (De)quantization: elementwise when scale and zero point are per tensor (one value each),
#: as dlas's int8 models quantize activations (`dlas.compiler.quantized`).
QDQ_OPS = frozenset({"relax.quantize", "relax.dequantize"})

TO_LAYOUT_NAME = "dlas_reorder_to_{}"
TO_NCHW_NAME = "dlas_reorder_to_nchw"


@dataclass
class LayoutReport:
    """What `convert_layout` did: convs in the layout, convs left NCHW, reorders."""

    layout: str
    convs: int = 0
    #: Convs kept NCHW: "conv <i>: <why>".
    kept_nchw: list[str] = field(default_factory=list)
    #: Reorders into the layout, by the op that needed them ("conv2d" for the image).
    to_layout: Counter = field(default_factory=Counter)
    #: Reorders back to NCHW, by the op that needed them ("output" for the model's).
    to_nchw: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"layout": self.layout, "convs": self.convs, "kept_nchw": self.kept_nchw,
                "to_layout": dict(self.to_layout), "to_nchw": dict(self.to_nchw)}

    def summary(self) -> str:
        """One line: how much of the model is in the layout and where it leaves it."""
        into = sum(self.to_layout.values())
        out = sum(self.to_nchw.values())
        where = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in self.to_nchw.items())
        text = (f"{self.layout}: {self.convs} convs in the layout, {len(self.kept_nchw)} "
                f"kept NCHW; {into} reorders into it, {out} back to NCHW ({where or 'none'})")
        return text


def _shape(expr: relax.Expr) -> tuple[int, ...] | None:
    return static_shape(expr.ty)


def _dtype(expr: relax.Expr) -> str:
    return str(getattr(expr.ty, "dtype", ""))


def _per_tensor(call: relax.Call) -> bool:
    """A (de)quantize whose scale and zero point are single constants."""
    params = [constant_value(arg) for arg in call.args[1:3]]
    return all(p is not None and p.size == 1 for p in params)


def _op_name(call: relax.Call) -> str:
    return call.op.name if isinstance(call.op, ir.Op) else ""


def _user(call: relax.Call) -> str:
    """How a report names the op that needed a reorder: "conv2d", "reshape", ..."""
    return _op_name(call).rsplit(".", 1)[-1] or "call"


@dataclass
class _Stored:
    """A value held in the layout: its var and its logical (NCHW) shape."""

    var: relax.Expr
    shape: tuple[int, int, int, int]


class _Rewriter:
    """Rewrites one Relax function binding by binding (see the module docstring)."""

    def __init__(self, bb: relax.BlockBuilder, layout: DataLayout, conv_reason: ConvReason,
                 report: LayoutReport, neighbour_reason: ConvReason | None = None) -> None:
        self.bb, self.layout, self.conv_reason, self.report = bb, layout, conv_reason, report
        self.neighbour_reason = neighbour_reason
        self.vars: dict[relax.Var, relax.Expr] = {}  # old var -> new NCHW var
        self.stored: dict[relax.Var, _Stored] = {}  # old var -> its form in the layout
        self.convs = 0
        self.in_dataflow = False
        #: each variable's users in the function (`wanted`), set by `convert_layout`
        self.users: dict[relax.Var, list[relax.VarBinding]] = {}
        #: a conv's result var -> whether it will be kept NCHW (`_kept_ahead`)
        self.kept_ahead: dict[relax.Var, bool] = {}

    # -- NCHW forms ---------------------------------------------------------------------
    def nchw(self, expr: relax.Expr, user: str) -> relax.Expr:
        """`expr` with every variable in its NCHW form (reordered back once, when first
        needed, by `user`)."""
        if isinstance(expr, relax.Var):
            if expr in self.vars:
                return self.vars[expr]
            if expr in self.stored:
                self.vars[expr] = self._to_nchw(self.stored[expr], user, expr.name)
                return self.vars[expr]
            return expr  # a function parameter
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.nchw(f, user) for f in expr.fields])
        if isinstance(expr, relax.Call):
            return relax.Call(expr.op, [self.nchw(a, user) for a in expr.args], expr.attrs,
                              expr.ty_args)
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self.nchw(expr.tuple_value, user), expr.index)
        return expr

    def _to_nchw(self, value: _Stored, user: str, name: str) -> relax.Expr:
        self.report.to_nchw[user] += 1
        layout = self.layout
        n, c, h, w = value.shape
        if layout.kind == "NHWC":
            return self.bb.emit(relax.op.permute_dims(value.var, [0, 3, 1, 2]), name)

        def unblock(x: te.Tensor) -> te.Tensor:
            b = layout.block
            return te.compute((n, c, h, w), lambda i, j, y, z: x[i, j // b, y, z, j % b],
                              name="to_nchw")

        return self.bb.emit_te(unblock, value.var, primfunc_name_hint=TO_NCHW_NAME)

    def _to_layout(self, expr: relax.Expr, user: str) -> _Stored | None:
        """A 4-d NCHW value stored in the layout (None when it is not one)."""
        shape = _shape(expr)
        if shape is None or len(shape) != 4:
            return None
        if isinstance(expr, relax.Var) and expr in self.stored:
            return self.stored[expr]
        value = self.nchw(expr, user)
        self.report.to_layout[user] += 1
        layout = self.layout
        if layout.kind == "NHWC":
            var = self.bb.emit(relax.op.permute_dims(value, [0, 2, 3, 1]))
        else:
            n, c, h, w = shape
            b = layout.block
            zero = tirx.const(0, _dtype(expr))

            def block(x: te.Tensor) -> te.Tensor:
                return te.compute(
                    layout.shape(shape),
                    lambda i, j, y, z, k: tirx.if_then_else(
                        j * b + k < c, x[i, j * b + k, y, z], zero),
                    name="to_layout")

            var = self.bb.emit_te(block, value,
                                  primfunc_name_hint=TO_LAYOUT_NAME.format(layout.name.lower()))
        stored = _Stored(var, shape)
        if isinstance(expr, relax.Var):
            self.stored[expr] = stored
            self.vars.setdefault(expr, value)  # its NCHW form stays at hand (the image)
        return stored

    # -- bindings -----------------------------------------------------------------------
    def binding(self, binding: relax.Binding) -> None:
        var = binding.var
        if isinstance(binding, relax.MatchCast):
            self.vars[var] = self.bb.match_cast(self.nchw(binding.value, "match_cast"),
                                                binding.ty, var.name)
            return
        value = binding.value
        stored = self._in_layout(value, var) if isinstance(value, relax.Call) else None
        if stored is None:
            user = _user(value) if isinstance(value, relax.Call) else type(value).__name__
            new = self.nchw(value, user)
            self.vars[var] = self._emit(var, new)
            return
        expr, shape = stored
        if isinstance(var, relax.DataflowVar):
            self.stored[var] = _Stored(self.bb.emit(expr, var.name), shape)
        else:  # leaves the dataflow block: NCHW there
            tmp = _Stored(self.bb.emit(expr, var.name + "_stored"), shape)
            self.vars[var] = self._emit(var, self._to_nchw(tmp, "output", var.name))

    def _emit(self, var: relax.Var, expr: relax.Expr) -> relax.Var:
        """Bind `expr` as the new `var`: an output of the dataflow block if `var` was."""
        if self.in_dataflow and not isinstance(var, relax.DataflowVar):
            return self.bb.emit_output(expr, var.name)
        return self.bb.emit(expr, var.name)

    def _in_layout(self, call: relax.Call, var: relax.Var
                   ) -> tuple[relax.Expr, tuple[int, ...]] | None:
        """The call rewritten to compute in the layout, and its logical shape; None when
        it stays NCHW."""
        name = _op_name(call)
        if name == "relax.nn.conv2d":
            return self._conv(call, var)
        out_shape = _shape(call)
        if out_shape is None or len(out_shape) != 4:
            return None
        if name in UNARY_OPS or (name in QDQ_OPS and _per_tensor(call)):
            first = call.args[0]
            if not (isinstance(first, relax.Var) and first in self.stored):
                return None
            args = [self.stored[first].var, *[self.nchw(a, _user(call)) for a in call.args[1:]]]
            return relax.Call(call.op, args, call.attrs, call.ty_args), out_shape
        if name in BINARY_OPS:
            return self._binary(call, out_shape, var)
        if name in POOL_OPS or name == "relax.nn.adaptive_avg_pool2d":
            return self._pool(call, out_shape)
        return None

    def _binary(self, call: relax.Call, out_shape: tuple[int, ...], var: relax.Var
                ) -> tuple[relax.Expr, tuple[int, ...]] | None:
        if not any(isinstance(a, relax.Var) and a in self.stored for a in call.args):
            return None
        if self._stays_nchw(call.args, var):
            return None
        channels = out_shape[1]
        pad = 1.0 if _op_name(call) == "relax.divide" else 0.0
        args = []
        for arg in call.args:
            value = constant_value(arg)
            if value is not None:
                if value.ndim > 4 or (value.ndim >= 3 and value.shape[-3] not in (1, channels)):
                    return None
                args.append(relax.const(self.layout.constant(value, channels, pad),
                                        str(value.dtype)))
                continue
            shape = _shape(arg)
            if shape is None or len(shape) != 4 or shape[1] != channels:
                return None  # a scalar var or a channel broadcast: keep NCHW
            stored = self._to_layout(arg, _user(call))
            if stored is None:
                return None
            args.append(stored.var)
        return relax.Call(call.op, args, call.attrs, call.ty_args), out_shape

    def _stays_nchw(self, args: Any, var: relax.Var) -> bool:
        """Whether an elementwise op with a stored operand costs fewer reorders computed
        in NCHW: each stored operand without an NCHW form (one a conv kept in NCHW made
        already is free) and a later reorder where its result flows into a conv in the
        layout, against each NCHW-only operand and a later reorder where the result
        flows into a conv kept in NCHW (`wanted`). Ties keep the layout.

        The case is a residual add behind convs kept in NCHW (`mixed_csr`'s sparse
        convs). In the layout, the add reordered the sparse conv's output into it and the
        next block's sparse conv reordered it back: two reorders per residual block
        (ResNet18-w0.5 at 90% global: 12 reorders, 73 us of 1.67 ms, Zen 3). In NCHW a
        run of such blocks pays one reorder on the way in and one on the way out."""
        to_nchw = to_layout = 0
        for arg in args:
            if not isinstance(arg, relax.Var):
                continue  # a constant: stored in either form for free
            if arg in self.stored:
                to_nchw += arg not in self.vars
            elif (shape := _shape(arg)) is not None and len(shape) == 4:
                to_layout += 1
        if not to_layout:
            return False  # all stored already: the layout reorders nothing
        wanted = self.wanted(var)
        return to_nchw + ("layout" in wanted) < to_layout + ("nchw" in wanted)

    def _pool(self, call: relax.Call, out_shape: tuple[int, ...]
              ) -> tuple[relax.Expr, tuple[int, ...]] | None:
        data = call.args[0]
        attrs = call.attrs
        if not (isinstance(data, relax.Var) and data in self.stored):
            return None
        if str(attrs.layout) != "NCHW" or str(attrs.out_layout) != "NCHW":
            return None
        x = self.stored[data].var
        name = self.layout.name
        if _op_name(call) == "relax.nn.adaptive_avg_pool2d":
            size = None if attrs.output_size is None else [int(v) for v in attrs.output_size]
            expr = relax.op.nn.adaptive_avg_pool2d(x, size, layout=name, out_layout=name)
        else:
            op = relax.op.nn.max_pool2d if _op_name(call) == "relax.nn.max_pool2d" \
                else relax.op.nn.avg_pool2d
            expr = op(x, [int(v) for v in attrs.pool_size], [int(v) for v in attrs.strides],
                      [int(v) for v in attrs.padding], [int(v) for v in attrs.dilation],
                      bool(attrs.ceil_mode), bool(attrs.count_include_pad), layout=name,
                      out_layout=name)
        return expr, out_shape

    def global_mean(self, call: relax.Call) -> relax.Expr | None:
        """A mean over H and W of a stored value: taken in the layout (keeping its dims),
        then reordered to NCHW (a C-element tensor) and reshaped as the call's result."""
        data = call.args[0]
        if _op_name(call) != "relax.mean" or not (isinstance(data, relax.Var)
                                                  and data in self.stored):
            return None
        axes = call.attrs.axis
        if axes is None or sorted(int(a) % 4 for a in axes) != [2, 3]:
            return None
        stored = self.stored[data]
        n, c, _, _ = stored.shape
        mean = self.bb.emit(relax.op.mean(stored.var, list(self.layout.spatial_axes),
                                          keepdims=True))
        pooled = self._to_nchw(_Stored(mean, (n, c, 1, 1)), "mean", data.name + "_mean")
        shape = _shape(call)
        return pooled if shape == (n, c, 1, 1) else relax.op.reshape(pooled, shape)

    def _conv(self, call: relax.Call, var: relax.Var
              ) -> tuple[relax.Expr, tuple[int, ...]] | None:
        index = self.convs
        self.convs += 1
        data = call.args[0]
        stored = isinstance(data, relax.Var) and data in self.stored
        plan = _plan_conv(call, self.layout, stored)
        why = plan if isinstance(plan, str) else self.conv_reason(plan.spec, plan.weight)
        if why is None and not stored:
            why = self._between_nchw(call, var)
        if why is not None:
            self.report.kept_nchw.append(f"conv {index}: {why}")
            return None
        assert not isinstance(plan, str)
        if plan.reads_nchw:
            x = self.nchw(data, "conv2d")
        else:
            stored_data = self._to_layout(data, "conv2d")
            assert stored_data is not None
            x = stored_data.var
        self.report.convs += 1
        spec = plan.spec
        conv = relax.op.nn.conv2d(
            x, relax.const(plan.padded, str(plan.weight.dtype)), spec.strides, spec.padding,
            spec.dilation, spec.groups, data_layout=spec.data_layout, kernel_layout="OIHW",
            out_layout=spec.out_layout, out_dtype=plan.out_dtype or None)
        return conv, _shape(call)

    def _between_nchw(self, call: relax.Call, var: relax.Var) -> str | None:
        """Why a conv the algorithm would take into the layout stays NCHW: its input is
        NCHW, every conv its result flows into is kept NCHW (`wanted`), and the algorithm
        computes such a conv in NCHW (`neighbour_reason`, asked with the NCHW spec), so
        the layout would cost a reorder on each side of it. MobileNetV2 pruned in its 1x1
        convs has a dense depthwise conv between every two sparse ones."""
        if self.neighbour_reason is None or self.wanted(var) != {"nchw"}:
            return None
        plan = _plan_conv(call, NCHW, stored=False)
        if isinstance(plan, str):
            return None
        return self.neighbour_reason(plan.spec, plan.weight)

    # -- looking ahead ------------------------------------------------------------------
    def _kept_ahead(self, binding: relax.VarBinding) -> bool:
        """Whether the conv `binding` calls will be kept NCHW, asked once per conv (a
        conv is consulted by every elementwise op upstream of it)."""
        if binding.var not in self.kept_ahead:
            plan = _plan_conv(binding.value, self.layout, stored=True)
            self.kept_ahead[binding.var] = (isinstance(plan, str) or self.conv_reason(
                plan.spec, plan.weight) is not None)
        return self.kept_ahead[binding.var]

    def wanted(self, var: relax.Var, depth: int = 6) -> set[str]:
        """The forms ("nchw", "layout") the convs `var` flows into read it in, through
        unary elementwise ops and binary ones with a constant operand (which follow their
        input's form: a decomposed batch-norm, ReLU) up to `depth` deep."""
        forms: set[str] = set()
        for binding in self.users.get(var, ()):
            call = binding.value
            name = _op_name(call)
            if name == "relax.nn.conv2d" and call.args[0].same_as(var):
                forms.add("nchw" if self._kept_ahead(binding) else "layout")
            elif depth > 0 and (name in UNARY_OPS or (
                    name in BINARY_OPS and all(a.same_as(var) or constant_value(a) is not None
                                               for a in call.args))):
                forms |= self.wanted(binding.var, depth - 1)
        return forms


@dataclass
class _ConvPlan:
    """A conv as it would be laid out: its spec (the layouts in it), its weight padded to
    whole channel blocks, and whether it reads its input in NCHW (the image)."""

    spec: ConvSpec
    weight: np.ndarray
    padded: np.ndarray
    reads_nchw: bool
    out_dtype: str


def _plan_conv(call: relax.Call, layout: DataLayout, stored: bool) -> _ConvPlan | str:
    """How `call` would be computed in `layout` (`stored`: its input is held in the
    layout), or why it cannot be, whatever the algorithm says."""
    attrs = call.attrs
    data, weight = call.args
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    data_shape, value = _shape(data), constant_value(weight)
    if layouts != ("NCHW", "OIHW", "NCHW"):
        return f"already in layout {layouts}"
    if data_shape is None or value is None:
        return "dynamic shape or a weight that is not a compile-time constant"
    groups = int(attrs.groups)
    n, c, h, w = data_shape
    o = value.shape[0]
    depthwise = groups > 1 and groups == c == o
    reads_nchw = (layout.kind == "NCHWc" and not stored and not depthwise
                  and c < layout.block)
    data_layout = NCHW if reads_nchw else layout
    in_c, out_c = data_layout.physical_channels(c), layout.physical_channels(o)
    if depthwise:
        padded = np.zeros((out_c, 1, *value.shape[2:]), value.dtype)
        groups = out_c
    else:
        padded = np.zeros((out_c, in_c // groups if groups > 1 else in_c,
                           *value.shape[2:]), value.dtype)
    padded[:o, :value.shape[1]] = value
    out_dtype = str(attrs.out_dtype) if str(attrs.out_dtype) not in ("", "void", "None") else ""
    spec = ConvSpec(
        data_shape=(n, in_c, h, w), weight_shape=tuple(padded.shape),
        strides=tuple(int(v) for v in attrs.strides),
        padding=tuple(int(v) for v in attrs.padding),
        dilation=tuple(int(v) for v in attrs.dilation), groups=groups,
        data_dtype=_dtype(data), weight_dtype=str(value.dtype),
        out_dtype=out_dtype or _dtype(call), data_layout=data_layout.name,
        out_layout=layout.name)
    return _ConvPlan(spec, value, padded, reads_nchw, out_dtype)


def _users(func: relax.Function) -> dict[relax.Var, list[relax.VarBinding]]:
    """Each variable's bindings that call an op on it."""
    users: dict[relax.Var, list[relax.VarBinding]] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding) and isinstance(binding.value, relax.Call):
                for arg in binding.value.args:
                    if isinstance(arg, relax.Var):
                        users.setdefault(arg, []).append(binding)
    return users


def convert_layout(mod: tvm.IRModule, layout: DataLayout, conv_reason: ConvReason,
                   function: str = "main", neighbour_reason: ConvReason | None = None
                   ) -> tuple[tvm.IRModule, LayoutReport]:
    """`mod` with `function`'s activations kept in `layout` (see the module docstring).

    `conv_reason(spec, weight)` says why a conv, laid out as `spec`, must stay NCHW
    (None: it takes the layout); the compiler asks the algorithm and its fallback.
    `neighbour_reason(spec, weight)`, asked with the NCHW spec of a conv between convs
    kept in NCHW, says why the algorithm computes it in NCHW too (None: the layout).
    """
    report = LayoutReport(layout.name)
    if layout.is_nchw:
        return mod, report
    # (x, indices)[0] -> x, aliases and unused values gone: what the importer leaves
    # around a max pool would otherwise look like an op with no form in the layout
    mod = relax.transform.CanonicalizeBindings()(mod)
    mod = relax.transform.DeadCodeElimination()(mod)
    func = mod[function]
    body = func.body
    bb = relax.BlockBuilder(mod)
    rewriter = _Rewriter(bb, layout, conv_reason, report, neighbour_reason)
    rewriter.users = _users(func)
    scratch = f"{function}_in_{layout.name.lower()}"
    with bb.function(scratch, list(func.params), pure=bool(func.is_pure)):
        for block in body.blocks:
            rewriter.in_dataflow = isinstance(block, relax.DataflowBlock)
            if rewriter.in_dataflow:
                with bb.dataflow():
                    _rewrite_block(rewriter, block)
            else:
                _rewrite_block(rewriter, block)
        rewriter.in_dataflow = False
        result = rewriter.nchw(body.body, "output")
        bb.emit_func_output(result)
    built = bb.get()
    new = built[scratch]
    for key, value in (func.attrs or {}).items():
        new = new.with_attr(key, value)
    out = tvm.IRModule({gv: f for gv, f in built.functions_items() if gv.name_hint != scratch},
                       attrs=built.attrs)
    out[function] = new
    out = relax.transform.DeadCodeElimination()(out)
    return out, report


def _rewrite_block(rewriter: _Rewriter, block: relax.BindingBlock) -> None:
    for binding in block.bindings:
        value = binding.value
        if isinstance(binding, relax.VarBinding) and isinstance(value, relax.Call):
            mean = rewriter.global_mean(value)
            if mean is not None:
                rewriter.vars[binding.var] = rewriter._emit(binding.var, mean)
                continue
        rewriter.binding(binding)
