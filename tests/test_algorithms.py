"""Every algorithm x data format x dtype against torch.nn.functional.conv2d.

The shapes are the convolutions of the paper's eight models (tests/data/
paper_conv_shapes.json, written by scripts/extract_conv_shapes.py). The default run takes
one representative per conv kind (kernel size x stride x grouped/depthwise, the smallest
of each); DLAS_FULL_TABLE=1 runs all of them, DLAS_FULL_TABLE=N every N-th row (CI: 4,
a spread of every model's shapes in a quarter of the time; `-m full_table` selects only
those). CSR
variants see a random sparsity per case, 0% to 99%, and every case also has one fully
pruned filter (an empty CSR row).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from tvm import s_tir, tirx

from dlas import registry
from dlas.algorithms.base import ConvAlgorithm, ConvSpec, conv_prim_func
from dlas.algorithms.csr import csr_from_weight, csr_to_dense
from dlas.compiler.build import make_target
from dlas.targets.host import host_target
from dlas.tir.schedule_helpers import is_parallelized, leaf_blocks

TARGET = make_target(host_target())
TABLE = Path(__file__).parent / "data" / "paper_conv_shapes.json"
ALGORITHMS = ["direct", "gemm", "spatial_pack", "direct_csr", "gemm_csr", "spatial_pack_csr"]
#: (data, weight, out) dtypes of the suite; the int8 ones are exact.
DTYPES = {
    "f32": ("float32", "float32", "float32"),
    "f16": ("float16", "float16", "float16"),
    "f16acc32": ("float16", "float16", "float32"),
    "u8": ("uint8", "int8", "int32"),
    "i8": ("int8", "int8", "int32"),
}


def load_table() -> list[dict]:
    return json.loads(TABLE.read_text())


def kind(row: dict) -> tuple:
    groups, c = row["groups"], row["data_shape"][1]
    grouping = "depthwise" if groups == c and groups > 1 else "grouped" if groups > 1 else "dense"
    return row["weight_shape"][2], row["strides"][0], grouping


def representatives(rows: list[dict]) -> list[dict]:
    """The cheapest conv of each kind (kernel, stride, grouping)."""
    best: dict[tuple, dict] = {}
    for row in rows:
        cost = np.prod(row["weight_shape"]) * np.prod(row["data_shape"][2:])
        if kind(row) not in best or cost < best[kind(row)]["_cost"]:
            best[kind(row)] = {**row, "_cost": cost}
    return list(best.values())


def case_id(row: dict) -> str:
    k, s, grouping = kind(row)
    n, c, h, w = row["data_shape"]
    return f"{c}x{h}x{w}-o{row['weight_shape'][0]}-k{k}s{s}-{grouping}"


def spec_of(row: dict, dtypes: tuple[str, str, str]) -> ConvSpec:
    return ConvSpec(
        data_shape=tuple(row["data_shape"]), weight_shape=tuple(row["weight_shape"]),
        strides=tuple(row["strides"]), padding=tuple(row["padding"]),
        dilation=tuple(row["dilation"]), groups=row["groups"],
        data_dtype=dtypes[0], weight_dtype=dtypes[1], out_dtype=dtypes[2],
    )


def random_operands(spec: ConvSpec, sparsity: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if spec.data_dtype in ("uint8", "int8"):
        low = 0 if spec.data_dtype == "uint8" else -128
        x = rng.integers(low, low + 256, spec.data_shape).astype(spec.data_dtype)
        w = rng.integers(-128, 128, spec.weight_shape).astype(spec.weight_dtype)
    else:
        x = rng.standard_normal(spec.data_shape).astype(spec.data_dtype)
        w = rng.standard_normal(spec.weight_shape).astype(spec.weight_dtype)
    w[rng.random(w.shape) < sparsity] = 0
    w[0] = 0  # an empty CSR row
    return x, w


def reference(spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    pt, pl, pb, pr = spec.padding
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), (pl, pr, pt, pb))
    return torch.nn.functional.conv2d(
        xt, torch.from_numpy(w.astype(np.float64)), stride=spec.strides,
        dilation=spec.dilation, groups=spec.groups).numpy()


def run(algorithm: ConvAlgorithm, spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    with TARGET:
        func, arrays = conv_prim_func(algorithm, spec, w)
    lib = tvm.compile(func, target=TARGET)
    out = tvm.runtime.tensor(np.zeros(spec.out_shape, spec.out_dtype))
    lib["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


def check(name: str, row: dict, dtype: str, seed: int) -> None:
    spec = spec_of(row, DTYPES[dtype])
    algorithm = registry.create("algorithms", name, {})
    reason = algorithm.unsupported_reason(spec)
    if reason is not None:
        # Only the documented gaps may be unsupported: dense spatial pack has no grouped
        # form; direct CSR reads strided convs through spatial pack's phase planes.
        documented = ((name == "spatial_pack" and spec.groups > 1)
                      or (name == "direct_csr" and spec.strides != (1, 1)))
        assert documented, reason
        fallback = algorithm.fallback()
        assert fallback is not None and fallback.unsupported_reason(spec) is None
        algorithm = fallback
    sparsity = float(np.random.default_rng(seed).uniform(0, 0.99)) if "csr" in name else 0.0
    x, w = random_operands(spec, sparsity, seed)
    got = run(algorithm, spec, x, w).astype(np.float64)
    ref = reference(spec, x, w)
    scale = max(1.0, float(np.abs(ref).max()))
    if spec.out_dtype == "int32":
        np.testing.assert_array_equal(got, ref)
    elif spec.out_dtype == "float16":
        np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * scale)
    else:  # float32 accumulation (fp16 inputs are exact in it)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)


ROWS = load_table()
REPS = representatives(ROWS)


def full_table_stride() -> int:
    """DLAS_FULL_TABLE=N: the full-table tests take every N-th row (1: all; unset or not a
    positive number: none, and they are skipped)."""
    try:
        return max(int(os.environ.get("DLAS_FULL_TABLE", "0")), 0)
    except ValueError:
        return 0


STRIDE = full_table_stride()
FULL_ROWS = ROWS[::STRIDE or len(ROWS)]  # unset: one row, collected and skipped


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("row", REPS, ids=[case_id(r) for r in REPS])
def test_float32_per_conv_kind(name: str, row: dict) -> None:
    check(name, row, "f32", seed=REPS.index(row))


#: Lower-precision dtypes on a dense 3x3 and a depthwise conv (the two kinds whose
#: accumulation lengths differ most).
DTYPE_ROWS = [r for r in REPS if kind(r) in {(3, 1, "dense"), (3, 2, "depthwise")}]


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("dtype", ["f16", "f16acc32", "u8", "i8"])
@pytest.mark.parametrize("row", DTYPE_ROWS, ids=[case_id(r) for r in DTYPE_ROWS])
def test_low_precision(name: str, dtype: str, row: dict) -> None:
    check(name, row, dtype, seed=7)


@pytest.mark.full_table
@pytest.mark.skipif(not STRIDE, reason="the full conv table runs with DLAS_FULL_TABLE=1")
@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("row", FULL_ROWS, ids=[case_id(r) for r in FULL_ROWS])
def test_full_table_float32(name: str, row: dict) -> None:
    check(name, row, "f32", seed=ROWS.index(row))


def test_table_covers_the_paper_models() -> None:
    models = {m for row in ROWS for m in row["models"]}
    assert len(models) == 8
    kinds = {kind(r) for r in ROWS}
    for needed in [(1, 1, "dense"), (1, 2, "dense"), (3, 1, "dense"), (3, 2, "dense"),
                   (7, 2, "dense"), (3, 1, "depthwise"), (3, 2, "depthwise"),
                   (5, 1, "depthwise"), (5, 2, "depthwise")]:
        assert needed in kinds, needed


@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.99, 1.0])
def test_csr_round_trip_and_empty_rows(sparsity: float) -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    w[rng.random(w.shape) < sparsity] = 0
    arrays = csr_from_weight(w)
    np.testing.assert_array_equal(csr_to_dense(arrays, w.shape), w)
    # every row non-empty (the kernels initialise at a row's first entry)
    assert (np.diff(arrays["csr_indptr"]) >= 1).all()
    assert len(arrays["csr_data"]) == sum(max(int(np.count_nonzero(r)), 1)
                                          for r in w.reshape(6, -1))


def _kinds(func: tirx.PrimFunc) -> dict[str, set]:
    sch = s_tir.Schedule(func)
    out: dict[str, set] = {}
    for block in leaf_blocks(sch):
        for b in [block, *sch.get_child_blocks(block)]:
            out[sch.get(b).name_hint] = {sch.get(lp).kind for lp in sch.get_loops(b)}
    return out


@pytest.mark.parametrize("name", ALGORITHMS)
def test_minimal_schedule_is_parallel_and_vectorized(name: str) -> None:
    spec = spec_of({"data_shape": [1, 16, 16, 16], "weight_shape": [32, 16, 3, 3],
                    "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1],
                    "groups": 1}, DTYPES["f32"])
    _, w = random_operands(spec, 0.5, 0)
    algorithm = registry.create("algorithms", name, {})
    with TARGET:
        unscheduled, _ = conv_prim_func(algorithm, spec, w, schedule=False)
        func, _ = conv_prim_func(algorithm, spec, w)
    assert "T.parallel(" not in unscheduled.script()
    sch = s_tir.Schedule(func)
    assert all(is_parallelized(sch, b) for b in leaf_blocks(sch))
    kinds = _kinds(func)
    assert any(tirx.ForKind.VECTORIZED in k for k in kinds.values())
    if name.endswith("_csr"):  # the sparse kernel's loops are its own, inside its block
        kernel = sch.get(sch.get_sblock(f"conv2d_nchw_{name}"))
        assert "T.vectorized(" in kernel.__str__()
        return
    # the product itself (not just a packing stage) runs vectorized
    products = [n for n in kinds if "update" in n or n.startswith("conv2d")]
    assert products and any(tirx.ForKind.VECTORIZED in kinds[n] for n in products)


def test_csr_skips_zeros() -> None:
    """The data-dependent loop's extent is each row's stored entries: sparsity is work
    saved (an empty row stores nothing; the kernel zeroes its tile first)."""
    spec = spec_of({"data_shape": [1, 8, 8, 8], "weight_shape": [4, 8, 3, 3],
                    "strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1],
                    "groups": 1}, DTYPES["f32"])
    _, w = random_operands(spec, 0.9, 1)
    with TARGET:
        func, arrays = conv_prim_func(registry.create("algorithms", "direct_csr", {}), spec, w)
    values, offsets, ptr = arrays
    split = values.shape[1]
    assert np.count_nonzero(values) == np.count_nonzero(w)
    assert values.size == ptr[-1] and offsets.shape == values.shape[:2]
    segments = np.diff(ptr)  # (row, chunk) segments, each padded to whole groups of split
    assert (segments % split == 0).all()
    assert values.size - np.count_nonzero(w) < split * len(segments)
    assert "Ptr[" in func.script()


