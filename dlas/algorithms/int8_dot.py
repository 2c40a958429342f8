"""The int8 dot-product micro-kernel of the blocked layout: which one a target gets, and
the weight packing it reads.

On a CPU with AVX512-VNNI, one `vpdpbusd` multiplies 4 uint8 inputs by 16 x 4 int8
weights and adds the 16 int32 sums to an accumulator vector: 64 MACs in one instruction,
4x the fp32 FMA's rate on the same pipes. TVM's tensor intrinsic `dot_16x4_vnni` emits it
for a block that computes exactly

    C[i] += int32(A[k]) * int32(B[i, k])        i < 16 (output lanes), k < 4 (inputs)

so a conv in NCHW16c uses it when its loops end in (16 output lanes, 4 input channels),
its input's 4 consecutive channels are contiguous (NCHWc's innermost axis) and its
weights are packed `[O/16, C/chunk, KH, KW, chunk/4, 16, 4]`, 64 contiguous bytes per
step (TVM's old x86 `conv2d_NCHWc_int8` and oneDNN pack them the same way).

`vpdpbusd` reads its inputs as *unsigned*. dlas's int8 models quantize activations
symmetrically to int8 (`dlas.compression.int8`), so the kernel reads x + 128 (uint8) and
starts each sum at -128 * sum(w) over the output channel's window: an exact, per-channel
constant computed with the packed weight (`compensation`). The padded border holds
x = 0, i.e. 128 after the shift, so the constant covers it too.

Which kernel (`int8_dot_kind`): "vnni" where the target's LLVM features include
avx512vnni, else none (the existing int8 path: LLVM vectorises the int32 FMAs). Tests
force "reference" (`forced_int8_dot`): the same layout, packing, compensation and
tensorize, with an intrinsic of the same description written in plain TIR, so
everything but the instruction itself runs on any x86 machine; on a VNNI CPU the real
one runs too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Literal

import numpy as np
from tvm import te, tirx
from tvm.script import tirx as T
from tvm.target import Target
from tvm.target.codegen import llvm_get_cpu_features

from .base import ConvSpec
from .blocked import PAD_NAME, blocking_of, pad_stored

Int8DotKind = Literal["vnni", "reference"]

#: Output lanes and input channels of one dot-product step.
DOT_LANES = 16
DOT_INPUTS = 4
#: Name of the compensation input (-128 * sum of each output channel's weights).
COMPENSATION = "int8_compensation"
#: Added to an int8 activation to make it the uint8 `vpdpbusd` reads.
SHIFT = 128

_FORCED: ContextVar[Int8DotKind | Literal["none"] | None] = ContextVar(
    "dlas_forced_int8_dot", default=None)


@contextmanager
def forced_int8_dot(kind: Int8DotKind | Literal["none"]) -> Iterator[None]:
    """Convs compiled inside use this int8 dot kernel ("none": the plain int8 path),
    whatever the target has."""
    token = _FORCED.set(kind)
    try:
        yield
    finally:
        _FORCED.reset(token)


def target_has_vnni(target: Target | None = None) -> bool:
    """Whether `target` (default: the current one) is an x86 LLVM target with
    AVX512-VNNI."""
    target = target if target is not None else Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return False
    return "avx512vnni" in {str(f) for f in llvm_get_cpu_features(target)}


def dot_shape_reason(spec: ConvSpec) -> str | None:
    """Why `spec` cannot use the 16x4 int8 dot product (None when it can)."""
    dtypes = (spec.data_dtype, spec.weight_dtype, spec.out_dtype)
    if dtypes not in (("uint8", "int8", "int32"), ("int8", "int8", "int32")):
        return f"dtypes {dtypes} are not (u)int8 x int8 -> int32"
    if spec.data_layout_.kind != "NCHWc" or spec.out_layout_.kind != "NCHWc":
        return "the dot product reads and writes NCHWc"
    cut = blocking_of(spec)
    if cut.depthwise:
        return "a depthwise conv has no channel reduction to dot over"
    if cut.out_block != DOT_LANES:
        return f"NCHW{cut.out_block}c: the dot product writes 16 output lanes"
    if cut.in_chunk % DOT_INPUTS:
        return f"input blocks of {cut.in_chunk} channels are not whole groups of 4"
    return None


def int8_dot_kind(spec: ConvSpec) -> Int8DotKind | None:
    """The dot-product kernel `spec` gets on the current target, or None (plain int8)."""
    if dot_shape_reason(spec) is not None:
        return None
    forced = _FORCED.get()
    kind = forced if forced is not None else "vnni" if target_has_vnni() else None
    if kind is None or kind == "none":
        return None
    _register()  # before any schedule: a tuned one replayed from a database tensorizes too
    return kind


def intrinsic_name(kind: Int8DotKind) -> str:
    """The tensor intrinsic family of `kind`; `tensorize_marked` appends the scope of
    the accumulator it finds (`@local`: a register tile, `@global`), registered here."""
    _register()
    return f"{INTRIN_PREFIX}{kind}"


def pack_dot_weight(spec: ConvSpec, weight: np.ndarray) -> np.ndarray:
    """The OIHW int8 weight as `[O/16, C/chunk, KH, KW, chunk/4, 16, 4]` (see module)."""
    cut = blocking_of(spec)
    _, _, kh, kw = weight.shape
    groups_of_4 = cut.in_chunk // DOT_INPUTS
    packed = weight.reshape(cut.out_blocks, DOT_LANES, cut.in_chunks, groups_of_4,
                            DOT_INPUTS, kh, kw).transpose(0, 2, 5, 6, 3, 1, 4)
    return np.ascontiguousarray(packed.astype("int8"))


def dot_input(data: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The padded input as the uint8 the dot product reads: int8 data shifted by 128 in
    the padding stage (padding included: 0 becomes 128), uint8 data only padded."""
    if spec.data_dtype == "uint8":
        return pad_stored(data, spec.data_layout_, spec.padding)
    pt, pl, pb, pr = spec.padding
    hy, wx = spec.data_layout_.spatial_axes
    shape = [int(v) for v in data.shape]
    h, w = shape[hy], shape[wx]
    shape[hy], shape[wx] = h + pt + pb, w + pl + pr

    def fshift(*idx: tirx.Var) -> tirx.Expr:
        src = list(idx)
        src[hy], src[wx] = idx[hy] - pt, idx[wx] - pl
        inside = tirx.all(idx[hy] >= pt, idx[hy] < pt + h, idx[wx] >= pl, idx[wx] < pl + w)
        value = tirx.if_then_else(inside, data[tuple(src)], tirx.const(0, "int8"))
        return (value.astype("int32") + SHIFT).astype("uint8")

    return te.compute(tuple(shape), fshift, name=PAD_NAME)


def compensation(spec: ConvSpec, weight: np.ndarray) -> np.ndarray:
    """Each output channel's sum's start: -128 * sum(w) for int8 data (read shifted to
    uint8), 0 for uint8 data."""
    if spec.data_dtype == "uint8":
        return np.zeros(weight.shape[0], "int32")
    sums = weight.astype(np.int64).reshape(weight.shape[0], -1).sum(axis=1)
    return (-SHIFT * sums).astype("int32")


_registered = False


#: Intrinsics are registered as f"{INTRIN_PREFIX}{kind}@{scope}".
INTRIN_PREFIX = "dlas_dot_16x4_u8i8i32_"
#: Accumulator scopes the intrinsics are registered for.
SCOPES = ("global", "local")
_registered = False


def _register() -> None:
    """Register the description and both kernels for each accumulator scope: TVM's own
    `dot_16x4_vnni` matches only a global accumulator, and the micro-kernel keeps its
    accumulators in a local (register) buffer."""
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin

    for scope in SCOPES:
        desc, vnni, reference = _intrinsics(scope)
        TensorIntrin.register(f"{INTRIN_PREFIX}vnni@{scope}", desc, vnni, override=True)
        TensorIntrin.register(f"{INTRIN_PREFIX}reference@{scope}", desc, reference,
                              override=True)
    _registered = True


def _intrinsics(scope: str) -> tuple[tirx.PrimFunc, tirx.PrimFunc, tirx.PrimFunc]:
    """(description, VNNI kernel, plain-TIR kernel) with the accumulator in `scope`.

    The description is TVM's `dot_16x4_vnni`'s (tensor_intrin/x86.py). Its kernel is
    not: it passes `vpdpbusd.512` two <16 x i32> operands, which the LLVM in TVM 0.27's
    wheel rejects (the intrinsic now takes <64 x i8>), so TVM's own fails to compile."""

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((4,), "uint8", offset_factor=1),
             B: T.Buffer((16, 4), "int8", offset_factor=1),
             C: T.Buffer((16,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def vnni(A: T.Buffer((4,), "uint8", offset_factor=1),
             B: T.Buffer((16, 4), "int8", offset_factor=1),
             C: T.Buffer((16,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            a = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            a64 = T.reinterpret(T.broadcast(a, 16), dtype="int8x64")
            b = B.vload([0, 0], dtype="int8x64")
            c = C.vload([0], dtype="int32x16")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                c, a64, b, dtype="int32x16")

    @T.prim_func(s_tir=True)
    def reference(A: T.Buffer((4,), "uint8", offset_factor=1),
                  B: T.Buffer((16, 4), "int8", offset_factor=1),
                  C: T.Buffer((16,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            for k in T.serial(0, 4):
                for i in T.vectorized(0, 16):
                    C[i] = C[i] + T.cast(A[k], "int32") * T.cast(B[i, k], "int32")

    return desc, vnni, reference
