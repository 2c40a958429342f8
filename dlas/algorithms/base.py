"""The convolution-algorithm contract (layer 4 of the stack).

An algorithm is a TE *compute* (what is computed, in which data format) plus a *schedule*
(how the loops run), kept apart as in TVM's TOPI. The compiler (`dlas.compiler.build`)
calls them for every `relax.nn.conv2d` of a model; anything an algorithm cannot handle
falls back to TVM's default lowering and the fallback is recorded, never silent.

The contract is shaped for the algorithms the DLAS paper compares:

* direct: `compute` reads the raw OIHW weight, `schedule` parallelises the loop nest.
* GEMM (im2col + matmul): `compute` has two stages; `schedule` starts from the output
  block it is given and reaches the im2col stage through `sch.get_producers`.
* spatial pack: weights are packed once at compile time by `weight_constants`
  (numpy), and `compute` reads the packed array instead of the OIHW weight.
* CSR-sparse: `weight_constants` returns `data`/`indices`/`indptr`, `compute` uses a
  data-dependent reduction extent (`indptr[r + 1] - indptr[r]`).

Every algorithm also has a data layout (layer 4's "data formats": `layout`, one of
`LAYOUT_KINDS`, NCHW by default, as in the paper). The compiler keeps the model's
activations in that layout across the graph (`dlas.compiler.layout`) and hands each conv
its data and output in it (`ConvSpec.data_layout`, `out_layout`); `compute` then reads and
writes the stored shapes (`ConvSpec.stored_data_shape`, `stored_out_shape`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

import numpy as np
from tvm import s_tir, te, tirx
from tvm.target import Target

# ConvSpec lives below this layer (the compiler reads it from tagged blocks too); it is
# the argument of every method of the algorithm contract, so it is re-exported here.
from ..tir.conv_spec import ConvSpec, tag_conv_block
from ..tir.layout import LAYOUT_KINDS
from ..tir.schedule_helpers import tensorize_marked

__all__ = [
    "RAW_WEIGHT",
    "SUPPORTED_DTYPES",
    "ConvAlgorithm",
    "ConvSpec",
    "conv_prim_func",
    "flatten_extern_blocks",
]

#: Name of the single weight input when an algorithm reads the raw OIHW weight.
RAW_WEIGHT = "weight"

#: (data, weight, out) dtypes every built-in algorithm computes: float32, float16 (with
#: float16 or float32 accumulation) and int8 inputs accumulated in int32.
SUPPORTED_DTYPES = frozenset({
    ("float32", "float32", "float32"),
    ("float16", "float16", "float16"),
    ("float16", "float16", "float32"),
    ("uint8", "int8", "int32"),
    ("int8", "int8", "int32"),
})


class ConvAlgorithm(ABC):
    """One convolution algorithm in one data layout: a TE compute plus its minimal schedule.

    Subclasses set `name` and implement `compute` and `schedule`; the rest has
    defaults that suit an algorithm reading the raw weight in NCHW.
    """

    name: ClassVar[str]
    #: True when `weight_constants` needs the bound weight (packing, CSR). A conv whose
    #: weight is not a compile-time constant then falls back (recorded).
    needs_weight_value: ClassVar[bool] = False
    #: The layout kinds this algorithm computes in (`LAYOUT_KINDS`).
    layouts: ClassVar[frozenset[str]] = frozenset({"NCHW"})
    #: The activation layout kind the model is compiled in, and NCHWc's channels per
    #: block (None: the target's SIMD width). Class defaults, so a plugin algorithm whose
    #: own `__init__` does not call this one's is an NCHW algorithm.
    layout: str = "NCHW"
    block: int | None = None

    def __init__(self, layout: str = "NCHW", block: int | None = None) -> None:
        if layout not in LAYOUT_KINDS:
            raise ValueError(f"layout must be one of {LAYOUT_KINDS}, got {layout!r}")
        if layout not in self.layouts:
            raise ValueError(f"{self.name} computes in {sorted(self.layouts)}, not {layout}")
        if block is not None and layout != "NCHWc":
            raise ValueError(f"a channel block is NCHWc's; layout {layout} has none")
        self.layout = layout
        self.block = block

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        """None if this algorithm computes `spec`; otherwise a one-line reason.

        The compiler records the reason and lowers that conv with `fallback()` (or TVM's
        default when there is none).
        """
        dtypes = (spec.data_dtype, spec.weight_dtype, spec.out_dtype)
        if dtypes not in SUPPORTED_DTYPES:
            return f"dtypes (data, weight, out) = {dtypes} not supported"
        for layout in {spec.data_layout_.kind, spec.out_layout_.kind}:
            if layout not in self.layouts:
                return f"{self.name} has no {layout} form"
        return None

    def keeps_nchw(self, spec: ConvSpec, weight_value: np.ndarray | None) -> str | None:
        """Why this algorithm computes the conv that `spec` lays out in the model's
        layout in NCHW instead, given its weight (None, the default: in the layout).

        The layout pass asks it for every conv the algorithm could compute in the layout,
        and reorders around the convs it keeps NCHW (recorded in the layout report), so
        an algorithm that picks its kernel per conv from the weight (`mixed_csr`) pays
        for its reorders in the model's time.
        """
        return None

    def between_nchw(self, spec: ConvSpec, weight_value: np.ndarray | None) -> str | None:
        """Why this algorithm computes in NCHW a conv it would take into the model's
        layout, when the conv reads an NCHW input and every conv after it is kept NCHW
        (`spec` is the conv's NCHW spec); None, the default: the layout, with a reorder
        on each side.

        The layout pass asks it only there, so an algorithm that keeps some convs NCHW
        (`keeps_nchw`) can spare the reorders around a conv between two of them.
        """
        return None

    def gpu_schedule(self, func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
        """This algorithm's untuned GPU schedule of `func`, a fused PrimFunc holding one of
        its convs, or None for the generic thread binding (`dlas.compiler.gpu_schedule`).
        Lives in the algorithm's folder (`gpu.py`) beside its CPU schedule."""
        return None

    def fallback(self) -> ConvAlgorithm | None:
        """The algorithm for convs this one does not support (documented per option).

        None means TVM's default lowering. Either way the compiler records each fallback.
        """
        return None

    def weight_constants(
        self, spec: ConvSpec, weight_value: np.ndarray | None
    ) -> dict[str, np.ndarray] | None:
        """Arrays built from the weight at compile time, which `compute` reads instead.

        None (the default) means: `compute` gets the raw OIHW weight as
        `weights["weight"]`. Otherwise every returned array becomes a constant input of
        the conv (in dict order) and `compute` gets one placeholder per key.
        """
        return None

    @abstractmethod
    def compute(
        self, data: te.Tensor, weights: Mapping[str, te.Tensor], spec: ConvSpec
    ) -> te.Tensor:
        """The TE definition of the conv; returns the (N, O, OH, OW) output in out_dtype.

        The output must come from a `te.compute` stage (the compiler finds and tags its
        block); intermediate stages (padding, im2col, packing) are free.
        """

    @abstractmethod
    def schedule(
        self, sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV, spec: ConvSpec
    ) -> s_tir.schedule.LoopRV | None:
        """Apply the algorithm's minimal schedule to its stages, in place.

        `block` is the conv output block; other stages of the algorithm are reached
        with `sch.get_producers`. The function may also hold fused elementwise consumers
        (bias, batch-norm, ReLU, residual add); the compiler schedules those afterwards,
        computing them at the returned loop (the outer parallel loop, whose iterations
        each produce whole output rows/planes) when one is returned.
        """


def conv_prim_func(
    algorithm: ConvAlgorithm,
    spec: ConvSpec,
    weight_value: np.ndarray | None = None,
    *,
    schedule: bool = True,
) -> tuple[tirx.PrimFunc, list[np.ndarray]]:
    """Build one conv as a standalone PrimFunc (data, *weights, out) from compute+schedule.

    Returns the PrimFunc and the weight arrays to pass after `data` (the raw weight, or
    the algorithm's compile-time constants). Data and output are in `spec`'s stored
    layouts (`dlas.tir.layout.DataLayout.from_nchw` / `to_nchw` convert test arrays).
    Used by tests and micro-benchmarks; the compiler builds the same compute inside the
    model instead.
    """
    spec.validate()
    reason = algorithm.unsupported_reason(spec)
    if reason is not None:
        raise ValueError(f"{algorithm.name} does not support {spec}: {reason}")
    data = te.placeholder(spec.stored_data_shape, spec.data_dtype, name="data")
    constants = algorithm.weight_constants(spec, weight_value)
    if constants is None:
        weights = {RAW_WEIGHT: te.placeholder(spec.weight_shape, spec.weight_dtype, "weight")}
        arrays = [] if weight_value is None else [weight_value]
    else:
        weights = {k: te.placeholder(v.shape, str(v.dtype), name=k) for k, v in constants.items()}
        arrays = list(constants.values())
    out = algorithm.compute(data, weights, spec)
    func = flatten_extern_blocks(te.create_prim_func([data, *weights.values(), out]))
    sch = s_tir.Schedule(func)
    block = tag_conv_block(sch, algorithm.name, spec)
    if schedule:
        algorithm.schedule(sch, block, spec)
        tensorize_marked(sch)
    return sch.mod["main"], arrays


def flatten_extern_blocks(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Drop the opaque wrapper blocks `te.extern` puts around a TIR-written stage.

    CSR kernels are written in TIR (their reduction extent is data-dependent, which TE's
    nesting cannot schedule well) and enter TE through `te.extern`; `create_prim_func`
    wraps them in an "extern" block holding a second "root". Without the wrappers the
    kernel's blocks are ordinary children of the function's root, like any TE stage.
    """
    realize = func.body
    if not isinstance(realize, s_tir.SBlockRealize):
        return func
    root = realize.block
    body = _unwrap(root.body)
    if body.same_as(root.body):
        return func
    new_root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body,
                            root.init, root.alloc_buffers, root.match_buffers,
                            root.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, new_root))


def _is_wrapper(stmt: tirx.Stmt) -> bool:
    if not isinstance(stmt, s_tir.SBlockRealize):
        return False
    block = stmt.block
    return (block.name_hint in ("extern", "root") and not block.iter_vars
            and not block.alloc_buffers and not block.match_buffers and block.init is None)


def _unwrap(stmt: tirx.Stmt) -> tirx.Stmt:
    if _is_wrapper(stmt):
        return _unwrap(stmt.block.body)
    if isinstance(stmt, tirx.SeqStmt):
        parts = [_unwrap(s) for s in stmt.seq]
        if all(a.same_as(b) for a, b in zip(parts, stmt.seq, strict=True)):
            return stmt
        return tirx.SeqStmt(parts)
    return stmt
