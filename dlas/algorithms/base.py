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
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
from tvm import s_tir, te, tirx

#: Block annotation the compiler puts on the output block of every algorithm-made conv.
#: Its value is the `ConvSpec` as JSON, so any (fused) PrimFunc says which of its blocks
#: is a convolution, and with which shapes, without outside bookkeeping.
CONV_SPEC_ATTR = "dlas.conv_spec"
#: Block annotation with the name of the algorithm that made the block.
CONV_ALGORITHM_ATTR = "dlas.conv_algorithm"

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


@dataclass(frozen=True)
class ConvSpec:
    """One `relax.nn.conv2d` call, NCHW data and OIHW weight, static shapes.

    Padding is (top, left, bottom, right), as relax stores it.
    """

    data_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    data_dtype: str
    weight_dtype: str
    out_dtype: str

    @property
    def batch(self) -> int:
        return self.data_shape[0]

    @property
    def in_channels(self) -> int:
        return self.data_shape[1]

    @property
    def out_channels(self) -> int:
        return self.weight_shape[0]

    @property
    def kernel_size(self) -> tuple[int, int]:
        return self.weight_shape[2], self.weight_shape[3]

    @property
    def is_depthwise(self) -> bool:
        """One input channel per group (MobileNet-style), any channel multiplier."""
        return self.groups > 1 and self.groups == self.in_channels

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        _, _, h, w = self.data_shape
        kh, kw = self.kernel_size
        pt, pl, pb, pr = self.padding
        oh = (h + pt + pb - (kh - 1) * self.dilation[0] - 1) // self.strides[0] + 1
        ow = (w + pl + pr - (kw - 1) * self.dilation[1] - 1) // self.strides[1] + 1
        return self.batch, self.out_channels, oh, ow

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the dense convolution (for sanity checks and reports)."""
        n, o, oh, ow = self.out_shape
        _, cg, kh, kw = self.weight_shape
        return n * o * oh * ow * cg * kh * kw

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ConvSpec:
        raw = json.loads(text)
        return cls(
            data_shape=tuple(raw["data_shape"]),
            weight_shape=tuple(raw["weight_shape"]),
            strides=tuple(raw["strides"]),
            padding=tuple(raw["padding"]),
            dilation=tuple(raw["dilation"]),
            groups=int(raw["groups"]),
            data_dtype=raw["data_dtype"],
            weight_dtype=raw["weight_dtype"],
            out_dtype=raw["out_dtype"],
        )

    def validate(self) -> None:
        """Raise ValueError on a spec no algorithm could compute (catches importer bugs)."""
        if len(self.data_shape) != 4 or len(self.weight_shape) != 4:
            raise ValueError(f"conv2d needs 4-d NCHW data and OIHW weight: {self}")
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"channels not divisible by groups: {self}")
        if self.weight_shape[1] * self.groups != self.in_channels:
            raise ValueError(f"weight in-channels do not match data / groups: {self}")
        if min(self.out_shape) <= 0:
            raise ValueError(f"empty output shape {self.out_shape}: {self}")


class ConvAlgorithm(ABC):
    """One convolution algorithm: a TE compute plus its minimal schedule.

    Subclasses set `name` and implement `compute` and `schedule`; the rest has
    defaults that suit an algorithm reading the raw weight.
    """

    name: ClassVar[str]
    #: True when `weight_constants` needs the bound weight (packing, CSR). A conv whose
    #: weight is not a compile-time constant then falls back (recorded).
    needs_weight_value: ClassVar[bool] = False

    def unsupported_reason(self, spec: ConvSpec) -> str | None:
        """None if this algorithm computes `spec`; otherwise a one-line reason.

        The compiler records the reason and lowers that conv with `fallback()` (or TVM's
        default when there is none).
        """
        dtypes = (spec.data_dtype, spec.weight_dtype, spec.out_dtype)
        if dtypes not in SUPPORTED_DTYPES:
            return f"dtypes (data, weight, out) = {dtypes} not supported"
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
    the algorithm's compile-time constants). Used by tests and micro-benchmarks; the
    compiler builds the same compute inside the model instead.
    """
    spec.validate()
    reason = algorithm.unsupported_reason(spec)
    if reason is not None:
        raise ValueError(f"{algorithm.name} does not support {spec}: {reason}")
    data = te.placeholder(spec.data_shape, spec.data_dtype, name="data")
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
    return sch.mod["main"], arrays


def tag_conv_block(
    sch: s_tir.Schedule, algorithm_name: str, spec: ConvSpec
) -> s_tir.schedule.SBlockRV:
    """Annotate the block that writes the function's output as a dlas conv; return it.

    Nested blocks (a CSR row block holding its update block) count once, as the outer one.
    """
    root = sch.get_sblock(sch.mod["main"].body.block.name_hint)
    top = {sch.get(b).name_hint for b in sch.get_child_blocks(root)}
    blocks = [b for b in sch.get_output_blocks(root) if sch.get(b).name_hint in top]
    if len(blocks) != 1:
        raise ValueError(f"conv compute must have exactly one output block, got {len(blocks)}")
    sch.annotate(blocks[0], CONV_SPEC_ATTR, spec.to_json())
    sch.annotate(blocks[0], CONV_ALGORITHM_ATTR, algorithm_name)
    return blocks[0]


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
