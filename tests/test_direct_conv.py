"""The direct convolution (compute + minimal schedule) against PyTorch, one conv at a time."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import s_tir, tirx

from dlas.algorithms.base import ConvSpec, conv_prim_func
from dlas.algorithms.direct import DirectConv
from dlas.compiler.build import make_target
from dlas.targets.host import host_target
from dlas.tir.schedule_helpers import is_parallelized, leaf_blocks

TARGET = make_target(host_target())


def make_spec(
    c: int,
    o: int,
    hw: int | tuple[int, int],
    k: int | tuple[int, int],
    stride: int = 1,
    pad: int | tuple[int, int, int, int] = 0,
    groups: int = 1,
    dilation: int = 1,
    dtype: str = "float32",
    out_dtype: str | None = None,
    batch: int = 1,
) -> ConvSpec:
    h, w = (hw, hw) if isinstance(hw, int) else hw
    kh, kw = (k, k) if isinstance(k, int) else k
    padding = (pad,) * 4 if isinstance(pad, int) else pad
    return ConvSpec(
        data_shape=(batch, c, h, w),
        weight_shape=(o, c // groups, kh, kw),
        strides=(stride, stride),
        padding=padding,
        dilation=(dilation, dilation),
        groups=groups,
        data_dtype=dtype,
        weight_dtype=dtype,
        out_dtype=out_dtype or dtype,
    )


# (id, spec): small versions of every conv kind in the paper's models.
CASES = [
    ("3x3_s1_p1", make_spec(8, 16, 12, 3, 1, 1)),
    ("3x3_s2_p1", make_spec(8, 16, 13, 3, 2, 1)),
    ("1x1_s1", make_spec(16, 8, 9, 1)),
    ("1x1_s2_shortcut", make_spec(8, 16, 10, 1, 2)),
    ("5x5_p2", make_spec(4, 6, 11, 5, 1, 2)),
    ("7x7_s2_p3_stem", make_spec(3, 8, 20, 7, 2, 3)),
    ("grouped_g4", make_spec(8, 12, 9, 3, 1, 1, groups=4)),
    ("depthwise", make_spec(8, 8, 10, 3, 1, 1, groups=8)),
    ("depthwise_s2_mult2", make_spec(6, 12, 11, 3, 2, 1, groups=6)),
    ("dilation2", make_spec(4, 8, 12, 3, 1, 2, dilation=2)),
    ("asym_pad_rect", make_spec(4, 5, (9, 7), (3, 2), 1, (1, 0, 2, 1))),
    ("batch2_nopad", make_spec(3, 4, 8, 3, batch=2)),
    ("out_1x1", make_spec(8, 8, 3, 3)),
]


def reference(spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    pt, pl, pb, pr = spec.padding
    xt = torch.nn.functional.pad(torch.from_numpy(x).double(), (pl, pr, pt, pb))
    out = torch.nn.functional.conv2d(
        xt, torch.from_numpy(w).double(), stride=spec.strides, dilation=spec.dilation,
        groups=spec.groups,
    )
    return out.numpy()


def run_direct(
    spec: ConvSpec, x: np.ndarray, w: np.ndarray, algo: DirectConv | None = None
) -> np.ndarray:
    """Build compute + schedule as one standalone PrimFunc for the host and run it."""
    with TARGET:
        func, arrays = conv_prim_func(algo or DirectConv(), spec, w)
    lib = tvm.compile(func, target=TARGET)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(spec.out_shape, spec.out_dtype), dev)
    lib["main"](tvm.runtime.tensor(x, dev), *[tvm.runtime.tensor(a, dev) for a in arrays], out)
    return out.numpy()


def random_inputs(spec: ConvSpec, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.data_shape).astype(spec.data_dtype)
    w = rng.standard_normal(spec.weight_shape).astype(spec.weight_dtype)
    return x, w


@pytest.mark.parametrize("spec", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_direct_matches_torch_fp32(spec: ConvSpec) -> None:
    x, w = random_inputs(spec)
    out = run_direct(spec, x, w)
    assert out.shape == spec.out_shape
    np.testing.assert_allclose(out, reference(spec, x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "spec",
    [
        make_spec(8, 16, 12, 3, 1, 1, dtype="float16"),
        make_spec(8, 8, 10, 3, 2, 1, groups=8, dtype="float16"),
        make_spec(8, 16, 9, 1, dtype="float16", out_dtype="float32"),
    ],
    ids=["3x3", "depthwise_s2", "1x1_acc_fp32"],
)
def test_direct_matches_torch_fp16(spec: ConvSpec) -> None:
    x, w = random_inputs(spec, seed=1)
    out = run_direct(spec, x, w)
    assert out.dtype == np.dtype(spec.out_dtype)
    ref = reference(spec, x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(out.astype(np.float32), ref, rtol=2e-2, atol=5e-2)


def test_direct_int8_accumulates_in_int32() -> None:
    spec = ConvSpec((1, 8, 9, 9), (16, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1,
                    "uint8", "int8", "int32")
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, spec.data_shape).astype(np.uint8)
    w = rng.integers(-128, 128, spec.weight_shape).astype(np.int8)
    out = run_direct(spec, x, w)
    ref = reference(spec, x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_array_equal(out, ref.astype(np.int32))


def test_parallel_only_variant_is_correct() -> None:
    spec = make_spec(8, 16, 13, 3, 2, 1)
    x, w = random_inputs(spec)
    out = run_direct(spec, x, w, DirectConv(vectorize=False))
    np.testing.assert_allclose(out, reference(spec, x, w), rtol=1e-4, atol=1e-4)
    func, _ = conv_prim_func(DirectConv(vectorize=False), spec)
    assert "T.parallel(" in func.script()
    assert tirx.ForKind.VECTORIZED not in loop_kinds_of(func)["conv2d_nchw_direct"]


def loop_kinds_of(func: tirx.PrimFunc) -> dict[str, set[tirx.ForKind]]:
    sch = s_tir.Schedule(func)
    return {
        sch.get(b).name_hint: {sch.get(lp).kind for lp in sch.get_loops(b)}
        for b in leaf_blocks(sch)
    }


def test_schedule_is_thread_parallel_and_vectorized() -> None:
    spec = make_spec(8, 16, 12, 3, 1, 1)
    unscheduled, _ = conv_prim_func(DirectConv(), spec, schedule=False)
    assert all(tirx.ForKind.PARALLEL not in k for k in loop_kinds_of(unscheduled).values())
    func, _ = conv_prim_func(DirectConv(), spec)
    kinds = loop_kinds_of(func)
    # Padding, zero-init and the reduction itself all run under a parallel loop.
    assert set(kinds) == {"data_pad", "conv2d_nchw_direct_init", "conv2d_nchw_direct_update"}
    assert all(tirx.ForKind.PARALLEL in k for k in kinds.values())
    assert tirx.ForKind.VECTORIZED in kinds["conv2d_nchw_direct_update"]
    sch = s_tir.Schedule(func)
    assert all(is_parallelized(sch, b) for b in leaf_blocks(sch))
    assert "T.parallel(" in func.script()


def test_spec_json_round_trip_and_shapes() -> None:
    spec = make_spec(6, 12, 11, 3, 2, 1, groups=6)
    assert ConvSpec.from_json(spec.to_json()) == spec
    assert spec.out_shape == (1, 12, 6, 6)
    assert spec.is_depthwise
    assert spec.macs == 12 * 6 * 6 * 1 * 3 * 3


def test_unsupported_dtype_is_reported() -> None:
    spec = make_spec(4, 4, 6, 3, dtype="float64")
    assert "not supported" in (DirectConv().unsupported_reason(spec) or "")
    with pytest.raises(ValueError, match="does not support"):
        conv_prim_func(DirectConv(), spec)


def test_invalid_spec_rejected() -> None:
    bad = ConvSpec((1, 6, 8, 8), (4, 4, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 4,
                   "float32", "float32", "float32")
    with pytest.raises(ValueError):
        bad.validate()
