"""The int8 dot-product micro-kernel of the blocked layout: which one a target gets, and
the weight packing it reads.

On a CPU with AVX512-VNNI, one `vpdpbusd` multiplies 4 uint8 inputs by 16 x 4 int8
weights and adds the 16 int32 sums to an accumulator vector: 64 MACs in one instruction,
4x the fp32 FMA's rate on the same pipes. Without VNNI, AVX2's `vpmaddubsw` (u8 x s8 pair
sums into int16) and `vpmaddwd` (int16 pairs into int32, by ones) do 8 x 4 in three
instructions (ONNX Runtime's MLAS does the same). Both compute, for `lanes` output
channels,

    C[i] += int32(A[k]) * int32(B[i, k])        i < lanes, k < 4 (input channels)

so a conv in NCHW<lanes>c uses them when its loops end in (lanes, 4 input channels), its
input's 4 consecutive channels are contiguous (NCHWc's innermost axis) and its weights
are packed `[O/lanes, C/chunk, KH, KW, chunk/4, lanes, 4]`, one vector per step (TVM's
old x86 `conv2d_NCHWc_int8` and oneDNN pack them the same way).

Both read their inputs as *unsigned*. dlas's int8 models quantize activations
symmetrically to int8 (`dlas.compression.int8`), so the kernel reads x + 128 (uint8) and
starts each sum at -128 * sum(w) over the output channel's window: an exact, per-channel
constant computed with the packed weight (`compensation`). The padded border holds
x = 0, i.e. 128 after the shift, so the constant covers it too.

`vpmaddubsw` saturates its int16 pair sums: exact only while 255 * (|w0| + |w1|) fits,
i.e. for 7-bit weights (|w| <= 64), which dlas's int8 compression writes on CPUs without
VNNI (`reduce_range`, for ONNX Runtime's same kernel). The weights are constants, so the
choice checks them (`int8_dot_kind(spec, weight)`): other weights keep the plain path.

Which kernel (`int8_dot_kind`): "vnni" where the target's LLVM features include
avx512vnni and the block is 16; "avx2" where they include avx2 (no VNNI) and the block
is 8; else none (the plain int8 path: LLVM widens to int32 and multiplies). Tests force
"reference" (`forced_int8_dot`): the same layout, packing, compensation and tensorize,
with an intrinsic of the same description written in plain TIR, so everything but the
instruction itself runs on any x86 machine; the real ones run where the CPU has them.
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

from ..tir.schedule_helpers import target_features
from .base import ConvSpec
from .blocked import blocking_of, pad_stored

Int8DotKind = Literal["vnni", "avx2", "reference"]

#: Output lanes of one step per kernel ("reference" takes the block's), and its inputs.
KERNEL_LANES = {"vnni": 16, "avx2": 8}
DOT_INPUTS = 4
#: The largest |weight| `vpmaddubsw`'s int16 pair sums hold exactly (255 * 2 * 64 < 2^15).
AVX2_WEIGHT_LIMIT = 64
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
    return "avx512vnni" in target_features(target)


def dot_shape_reason(spec: ConvSpec) -> str | None:
    """Why `spec` cannot use an int8 dot product (None when it can)."""
    dtypes = (spec.data_dtype, spec.weight_dtype, spec.out_dtype)
    if dtypes not in (("uint8", "int8", "int32"), ("int8", "int8", "int32")):
        return f"dtypes {dtypes} are not (u)int8 x int8 -> int32"
    if spec.data_layout_.kind != "NCHWc" or spec.out_layout_.kind != "NCHWc":
        return "the dot product reads and writes NCHWc"
    cut = blocking_of(spec)
    if cut.depthwise:
        return "a depthwise conv has no channel reduction to dot over"
    if cut.out_block not in KERNEL_LANES.values():
        return f"NCHW{cut.out_block}c: the dot products write 16 or 8 output lanes"
    if cut.in_chunk % DOT_INPUTS:
        return f"input blocks of {cut.in_chunk} channels are not whole groups of 4"
    return None


def target_dot_kind(spec: ConvSpec) -> Int8DotKind | None:
    """The kernel the current target has for `spec`'s block, whatever the weights."""
    forced = _FORCED.get()
    if forced is not None:
        return None if forced == "none" else forced
    features = target_features()
    lanes = blocking_of(spec).out_block
    if "avx512vnni" in features:
        return "vnni" if lanes == KERNEL_LANES["vnni"] else None
    if "avx2" in features and lanes == KERNEL_LANES["avx2"]:
        return "avx2"
    return None


def int8_dot_kind(spec: ConvSpec, weight: np.ndarray | None) -> Int8DotKind | None:
    """The dot-product kernel `spec` with this (compile-time) weight gets on the current
    target, or None (the plain int8 path)."""
    if dot_shape_reason(spec) is not None:
        return None
    kind = target_dot_kind(spec)
    if kind is None:
        return None
    if kind == "avx2" and (weight is None or np.abs(weight.astype(np.int32)).max(initial=0)
                           > AVX2_WEIGHT_LIMIT):
        return None  # vpmaddubsw would saturate: 8-bit weights stay on the plain path
    _register()  # before any schedule: a tuned one replayed from a database tensorizes too
    return kind


def intrinsic_name(kind: Int8DotKind, lanes: int) -> str:
    """The tensor intrinsic family of `kind` over `lanes` outputs; `tensorize_marked`
    appends the scope of the accumulator it finds (`@local`: a register tile, `@global`),
    registered here."""
    _register()
    return f"{INTRIN_PREFIX}{kind}_{lanes}x4"


def pack_dot_weight(spec: ConvSpec, weight: np.ndarray) -> np.ndarray:
    """The OIHW int8 weight as `[O/lanes, C/chunk, KH, KW, chunk/4, lanes, 4]`."""
    cut = blocking_of(spec)
    _, _, kh, kw = weight.shape
    groups_of_4 = cut.in_chunk // DOT_INPUTS
    packed = weight.reshape(cut.out_blocks, cut.out_block, cut.in_chunks, groups_of_4,
                            DOT_INPUTS, kh, kw).transpose(0, 2, 5, 6, 3, 1, 4)
    return np.ascontiguousarray(packed.astype("int8"))


def dot_input(data: te.Tensor, spec: ConvSpec) -> te.Tensor:
    """The padded input as the uint8 the dot product reads: int8 data shifted by 128 in
    the padding stage (padding included: 0 becomes 128), uint8 data only padded."""
    if spec.data_dtype == "uint8":
        return pad_stored(data, spec.data_layout_, spec.padding)
    return pad_stored(data, spec.data_layout_, spec.padding,
                      convert=lambda x: (x.astype("int32") + SHIFT).astype("uint8"))


def compensation(spec: ConvSpec, weight: np.ndarray) -> np.ndarray:
    """Each output channel's sum's start: -128 * sum(w) for int8 data (read shifted to
    uint8), 0 for uint8 data."""
    if spec.data_dtype == "uint8":
        return np.zeros(weight.shape[0], "int32")
    sums = weight.astype(np.int64).reshape(weight.shape[0], -1).sum(axis=1)
    return (-SHIFT * sums).astype("int32")


#: Intrinsics are registered as f"{INTRIN_PREFIX}{kind}_{lanes}x4@{scope}".
INTRIN_PREFIX = "dlas_dot_u8i8i32_"
#: Accumulator scopes the intrinsics are registered for.
SCOPES = ("global", "local")
_registered = False


def _register() -> None:
    """Register the description and kernels for each lane count and accumulator scope:
    TVM's own `dot_16x4_vnni` matches only a global accumulator, and the micro-kernel
    keeps its accumulators in a local (register) buffer."""
    global _registered
    if _registered:
        return
    from tvm.s_tir import TensorIntrin

    builders = {"vnni": _vnni, "avx2": _avx2}
    for scope in SCOPES:
        for kind, lanes in KERNEL_LANES.items():
            desc = _description(lanes, scope)
            for name, kernel in ((kind, builders[kind](scope)),
                                 ("reference", _reference(lanes, scope))):
                TensorIntrin.register(f"{INTRIN_PREFIX}{name}_{lanes}x4@{scope}", desc,
                                      kernel, override=True)
    _registered = True


def _description(lanes: int, scope: str) -> tirx.PrimFunc:
    """TVM's `dot_16x4_vnni` description (tensor_intrin/x86.py), `lanes` wide, the
    accumulator in `scope`."""

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((4,), "uint8", offset_factor=1),
             B: T.Buffer((lanes, 4), "int8", offset_factor=1),
             C: T.Buffer((lanes,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    return desc


def _vnni(scope: str) -> tirx.PrimFunc:
    """16 x 4 with one `vpdpbusd`. Not TVM's `dot_16x4_vnni` kernel: that passes the
    intrinsic two <16 x i32> operands, which the LLVM in TVM 0.27's wheel rejects (it now
    takes <64 x i8>), so TVM's own fails to compile."""

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

    return vnni


def _avx2(scope: str) -> tirx.PrimFunc:
    """8 x 4 with `vpmaddubsw` (u8 x s8 pairs into int16; exact for 7-bit weights) and
    `vpmaddwd` by ones (int16 pairs into int32), then one add."""

    @T.prim_func(s_tir=True)
    def avx2(A: T.Buffer((4,), "uint8", offset_factor=1),
             B: T.Buffer((8, 4), "int8", offset_factor=1),
             C: T.Buffer((8,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(C[0:8], A[0:4], B[0:8, 0:4])
            T.writes(C[0:8])
            a = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            a32 = T.reinterpret(T.broadcast(a, 8), dtype="int8x32")
            b = B.vload([0, 0], dtype="int8x32")
            pairs = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.ub.sw"), a32, b,
                dtype="int16x16")
            quads = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"), pairs,
                T.broadcast(T.int16(1), 16), dtype="int32x8")
            C[T.ramp(T.int32(0), 1, 8)] = C.vload([0], dtype="int32x8") + quads

    return avx2


def _reference(lanes: int, scope: str) -> tirx.PrimFunc:
    """The description's arithmetic in plain TIR: exact on any CPU (the tests' path)."""

    @T.prim_func(s_tir=True)
    def reference(A: T.Buffer((4,), "uint8", offset_factor=1),
                  B: T.Buffer((lanes, 4), "int8", offset_factor=1),
                  C: T.Buffer((lanes,), "int32", offset_factor=1, scope=scope)) -> None:
        with T.sblock("root"):
            T.reads(C[0:lanes], A[0:4], B[0:lanes, 0:4])
            T.writes(C[0:lanes])
            for k in T.serial(0, 4):
                for i in T.vectorized(0, lanes):
                    C[i] = C[i] + T.cast(A[k], "int32") * T.cast(B[i, k], "int32")

    return reference
