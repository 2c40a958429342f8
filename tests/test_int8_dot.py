"""The int8 dot-product micro-kernels (`dlas.algorithms.int8_dot`): VNNI's `vpdpbusd` for
int8 convs in NCHW16c, AVX2's `vpmaddubsw` + `vpmaddwd` in NCHW8c.

Every path runs on any x86 machine: the choice is forced. "reference" is the same
compute, packing, compensation and tensorize with a plain-TIR intrinsic of the same
description, so only the instructions are left to their targets, whose code is compiled
here and checked for them, and run where the CPU has them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm

from dlas import registry
from dlas.algorithms.base import ConvSpec, conv_prim_func
from dlas.algorithms.int8_dot import (
    compensation,
    dot_shape_reason,
    forced_int8_dot,
    int8_dot_kind,
    pack_dot_weight,
    target_has_vnni,
)
from dlas.targets.host import host_target
from dlas.tir.layout import DataLayout
from dlas.tir.schedule_helpers import forced_simd, target_features

from .test_layouts import (
    CONVS,
    TARGET,
    Conv,
    check_against_pytorch,
    laid_out,
    operands,
    run_conv,
)

BLOCKED = DataLayout("NCHWc", 16)
#: lanes -> (vector unit the schedules are shaped for, NCHWc of that block)
PATHS = {16: (512, 32), 8: (256, 16)}
INT8_DTYPES = {"i8": ("int8", "int8", "int32"), "u8": ("uint8", "int8", "int32")}
#: The random convs' plain ones, and what they lack: dilation, a wide 1x1, stride 2 on 1x1.
DOT_CONVS = [c for c in CONVS if not c.depthwise] + [
    Conv(40, 24, 9, 9, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), False),
    Conv(72, 36, 5, 6, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False),
    Conv(16, 48, 8, 8, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), False)]
#: Each dense algorithm's dot-product form; uint8 data differs from int8 only in not being
#: shifted (`int8_dot.dot_input`, which the three share), so direct alone runs both.
ALGORITHM_DTYPES = [("direct", "i8"), ("direct", "u8"), ("gemm", "i8"), ("spatial_pack", "i8")]
HOST = tvm.target.Target(host_target())
HOST_HAS_VNNI = target_has_vnni(HOST)
HOST_HAS_AVX2 = "avx2" in target_features(HOST)


def tensorized_blocks(algorithm: str, spec: ConvSpec, w: np.ndarray,
                      target: tvm.target.Target = TARGET) -> list[str]:
    """The blocks of `algorithm`'s kernel for `spec` that tensorize made (the dot-product
    block's update, blockized as `..._dot..._update_o`): none on the plain int8 path,
    which is exact too, so a test of the dot product must check it ran."""
    with target:
        func, _ = conv_prim_func(registry.create("algorithms", algorithm,
                                                 {"layout": spec.out_layout_.kind}), spec, w)
    return re.findall(r'sblock\("(\w*_dot\w*_update_o)"\)', func.script())


def _seven_bit(w: np.ndarray) -> np.ndarray:
    """Weights within +-64, as dlas's int8 compression writes them on CPUs without VNNI."""
    return np.clip(w, -64, 64)


def _vnni_target(mcpu: str = "cascadelake") -> tvm.target.Target:
    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})


@pytest.mark.parametrize("lanes", sorted(PATHS))
@pytest.mark.parametrize(("algorithm", "dtypes"), ALGORITHM_DTYPES)
def test_random_int8_convs_through_the_dot_product_match_pytorch(algorithm: str, dtypes: str,
                                                                 lanes: int) -> None:
    """Exact int32 results, with the extremes of int8 (-128, 127) in data and weights, for
    each dense algorithm's dot-product form."""
    blocked = DataLayout("NCHWc", lanes)
    for i, conv in enumerate(DOT_CONVS):
        spec = laid_out(conv, blocked, blocked, dtypes=INT8_DTYPES[dtypes])
        x, w = operands(conv, spec, seed=100 + i)
        with forced_simd(*PATHS[lanes]), forced_int8_dot("reference"):
            assert int8_dot_kind(spec, w) == "reference"
            assert tensorized_blocks(algorithm, spec, w), f"{algorithm}: not tensorized"
            got = run_conv(algorithm, spec, x, w)
        check_against_pytorch(conv, spec, got, x, w,
                              f"{algorithm} dot product {dtypes} x{lanes}")


def test_the_choice_follows_the_targets_features_and_the_weights() -> None:
    conv = Conv(32, 32, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    wide = laid_out(conv, BLOCKED, BLOCKED, dtypes=INT8_DTYPES["i8"])
    narrow = laid_out(conv, DataLayout("NCHWc", 8), DataLayout("NCHWc", 8),
                      dtypes=INT8_DTYPES["i8"])
    _, w8 = operands(conv, wide, seed=0)  # 8-bit weights: -128..127
    w7 = _seven_bit(w8)
    for mcpu, expected in [("cascadelake", "vnni"), ("znver4", "vnni"),
                           ("skylake-avx512", None), ("znver1", None)]:
        with _vnni_target(mcpu):
            assert int8_dot_kind(wide, w8) == expected, mcpu
    for mcpu, expected in [("znver1", "avx2"), ("haswell", "avx2"), ("cascadelake", None),
                           ("sandybridge", None)]:
        with _vnni_target(mcpu):
            assert int8_dot_kind(narrow, w7) == expected, mcpu
    with _vnni_target("znver1"):  # vpmaddubsw would saturate on 8-bit weights
        assert int8_dot_kind(narrow, w8) is None
    with _vnni_target(), forced_int8_dot("none"):
        assert int8_dot_kind(wide, w8) is None
    with forced_int8_dot("reference"):
        assert int8_dot_kind(wide, w8) == "reference"
    with HOST:  # forcing is undone
        assert int8_dot_kind(wide, w8) == ("vnni" if HOST_HAS_VNNI else None)


def test_convs_the_dot_product_cannot_take_keep_the_plain_path() -> None:
    plain = Conv(32, 32, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    depthwise = Conv(32, 32, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True)
    cases = {
        "float": laid_out(plain, BLOCKED, BLOCKED),
        "NCHW4c": laid_out(plain, DataLayout("NCHWc", 4), DataLayout("NCHWc", 4),
                           dtypes=INT8_DTYPES["i8"]),
        "NHWC": laid_out(plain, DataLayout("NHWC"), DataLayout("NHWC"),
                         dtypes=INT8_DTYPES["i8"]),
        "NCHW in": laid_out(plain, DataLayout("NCHW"), BLOCKED, dtypes=INT8_DTYPES["i8"]),
        "depthwise": laid_out(depthwise, BLOCKED, BLOCKED, dtypes=INT8_DTYPES["i8"]),
    }
    with forced_int8_dot("reference"):
        for name, spec in cases.items():
            w = np.ones(spec.weight_shape, "int8")
            assert dot_shape_reason(spec) is not None, name
            assert int8_dot_kind(spec, w) is None, name


def test_weights_are_packed_16_lanes_by_4_inputs_and_compensated() -> None:
    conv = Conv(32, 16, 4, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    spec = laid_out(conv, BLOCKED, BLOCKED, dtypes=INT8_DTYPES["i8"])
    w = np.random.default_rng(0).integers(-128, 128, spec.weight_shape).astype("int8")
    packed = pack_dot_weight(spec, w)
    assert packed.shape == (1, 2, 3, 3, 4, 16, 4)
    # [oc block, input block, ky, kx, group of 4, lane, input in group]
    assert packed[0, 1, 2, 0, 3, 5, 2] == w[5, 16 + 3 * 4 + 2, 2, 0]
    np.testing.assert_array_equal(compensation(spec, w),
                                  -128 * w.astype(np.int64).reshape(16, -1).sum(axis=1))
    unsigned = laid_out(conv, BLOCKED, BLOCKED, dtypes=INT8_DTYPES["u8"])
    assert not compensation(unsigned, w).any()  # uint8 data is read as it is


@pytest.mark.parametrize("algorithm", ["direct", "gemm", "spatial_pack"])
@pytest.mark.parametrize(("mcpu", "lanes", "instruction"),
                         [("cascadelake", 16, "vpdpbusd"), ("znver1", 8, "vpmaddubsw")])
def test_each_kernel_compiles_to_its_instruction(mcpu: str, lanes: int, instruction: str,
                                                 algorithm: str) -> None:
    """TVM's own `dot_16x4_vnni` fails in LLVM's IR verifier with this TVM; dlas's
    kernels compile, one instruction per (tile accumulator, group of 4 inputs) step, in
    every dense algorithm."""
    blocked = DataLayout("NCHWc", lanes)
    conv = Conv(32, 32, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    spec = laid_out(conv, blocked, blocked, dtypes=INT8_DTYPES["i8"])
    _, w = operands(conv, spec, seed=0)
    algorithm = registry.create("algorithms", algorithm, {"layout": "NCHWc"})
    target = _vnni_target(mcpu)
    with target:
        func, _ = conv_prim_func(algorithm, spec, _seven_bit(w))
    lib = tvm.compile(func, target=target)
    assert instruction in lib.mod.inspect_source("asm")


@pytest.mark.skipif(not HOST_HAS_VNNI, reason="this CPU has no AVX512-VNNI")
@pytest.mark.parametrize(("algorithm", "dtypes"), ALGORITHM_DTYPES)
def test_vnni_on_this_cpu_matches_pytorch(algorithm: str, dtypes: str) -> None:
    for i, conv in enumerate(DOT_CONVS):
        spec = laid_out(conv, BLOCKED, BLOCKED, dtypes=INT8_DTYPES[dtypes])
        x, w = operands(conv, spec, seed=200 + i)
        with TARGET:
            assert int8_dot_kind(spec, w) == "vnni"
        assert tensorized_blocks(algorithm, spec, w), f"{algorithm}: not tensorized"
        check_against_pytorch(conv, spec, run_conv(algorithm, spec, x, w), x, w,
                              f"{algorithm} vpdpbusd {dtypes}")


#: The AVX2 kernel's target: this CPU where it lacks VNNI, else a Zen 1 (AVX2 + FMA, no
#: AVX-512), whose code a VNNI CPU runs too, so the `vpmaddubsw` path runs on every AVX2 host.
AVX2_TARGET = TARGET if not HOST_HAS_VNNI else tvm.target.Target(
    {"kind": "llvm", "mcpu": "znver1", "num-cores": 2})


@pytest.mark.skipif(not HOST_HAS_AVX2, reason="this CPU has no AVX2")
@pytest.mark.parametrize(("algorithm", "dtypes"), ALGORITHM_DTYPES)
def test_avx2_on_this_cpu_matches_pytorch(algorithm: str, dtypes: str) -> None:
    """The real `vpmaddubsw` path, 7-bit weights at both extremes (+-64) with uint8
    data up to 255: the int16 pair sums come as close to saturating as they can. On a
    VNNI CPU it runs as Zen 1 code (`AVX2_TARGET`)."""
    blocked = DataLayout("NCHWc", 8)
    for i, conv in enumerate(DOT_CONVS):
        spec = laid_out(conv, blocked, blocked, dtypes=INT8_DTYPES[dtypes])
        x, w = operands(conv, spec, seed=300 + i)
        w = _seven_bit(w)
        w[:, :, 0, 0], w[:, :, -1, -1] = 64, -64  # pairs of +-64 x 255: 32640 < 2^15
        with AVX2_TARGET:
            assert int8_dot_kind(spec, w) == "avx2"
        assert tensorized_blocks(algorithm, spec, w, AVX2_TARGET), f"{algorithm}: not tensorized"
        check_against_pytorch(conv, spec, run_conv(algorithm, spec, x, w, AVX2_TARGET), x, w,
                              f"{algorithm} vpmaddubsw {dtypes}")
