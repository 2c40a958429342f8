"""The pixel-tile sparse kernel (dlas/algorithms/spmm_kernel.py) of the NCHW CSR
algorithms against PyTorch: seeded random convs x sparsity 0-99% x both SIMD paths (the
choice forced, so the AVX2 and the AVX-512 tilings run on any x86 machine), structured
weights whose rows share their columns (one stored entry serving several channels), and
every kernel decision forced one by one (tile sizes, split accumulators, channel chunks,
row blocks). The vector layouts' block-CSR form has its own suite in test_layouts.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
import tvm
from tvm import s_tir, te, tirx

from dlas import registry
from dlas.algorithms.base import ConvSpec, conv_prim_func
from dlas.algorithms.direct.compute import direct_csr_plan
from dlas.algorithms.gemm.compute import gemm_csr_plan
from dlas.algorithms.schedule_util import vectorize_copy
from dlas.algorithms.spatial_pack.compute import spatial_pack_csr_plan
from dlas.algorithms.spmm_kernel import (
    ROW_PTR,
    VALUES,
    dense_from_rows,
    sparse_rows,
    writes_output,
)
from dlas.algorithms.spmm_tiling import (
    PixelGrid,
    SparseTiling,
    choose_tiling,
    forced_tiling,
    row_block_of,
)
from dlas.compiler.build import make_target
from dlas.targets.host import host_target
from dlas.tir.schedule_helpers import forced_simd, gathers_along

TARGET = make_target(host_target(2))
SPARSE = ["direct_csr", "gemm_csr", "spatial_pack_csr"]
#: The two x86 SIMD paths: (bits, registers).
PATHS = {"avx512": (512, 32), "avx2": (256, 16)}
#: (C, O, H, W, kernel, stride, padding, dilation, groups): every kind the models have,
#: odd sizes (tail tiles, rows that do not fill a vector) among them.
CONVS = [
    (16, 32, 12, 12, 3, 1, 1, 1, 1),
    (8, 16, 9, 7, 3, 2, 1, 1, 1),
    (24, 40, 8, 8, 1, 1, 0, 1, 1),
    (12, 20, 7, 7, 1, 2, 0, 1, 1),
    (16, 16, 10, 10, 3, 1, 1, 1, 16),
    (12, 12, 9, 9, 5, 2, 2, 1, 12),
    (8, 8, 9, 9, 3, 1, 2, 2, 1),
    (3, 16, 11, 11, 3, 1, 1, 1, 1),
    (32, 32, 4, 4, 3, 1, 1, 1, 2),
]
SPARSITIES = [0.0, 0.5, 0.8, 0.9, 0.99]


def spec_of(conv: tuple) -> ConvSpec:
    c, o, h, w, k, s, p, d, g = conv
    return ConvSpec((1, c, h, w), (o, c // g, k, k), (s, s), (p, p, p, p), (d, d), g,
                    "float32", "float32", "float32")


def operands(spec: ConvSpec, sparsity: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.data_shape).astype(np.float32)
    w = rng.standard_normal(spec.weight_shape).astype(np.float32)
    w[rng.random(w.shape) < sparsity] = 0
    return x, w


def run(name: str, spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    algorithm = registry.create("algorithms", name, {})
    if algorithm.unsupported_reason(spec) is not None:  # direct CSR's strided convs
        assert name == "direct_csr" and spec.strides != (1, 1)
        algorithm = algorithm.fallback()
    with TARGET:
        func, arrays = conv_prim_func(algorithm, spec, w)
    lib = tvm.compile(func, target=TARGET)
    out = tvm.runtime.tensor(np.zeros(spec.out_shape, np.float32))
    lib["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


def check(spec: ConvSpec, got: np.ndarray, x: np.ndarray, w: np.ndarray, label: str) -> None:
    ref = torch.nn.functional.conv2d(
        torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64)),
        stride=spec.strides, padding=spec.padding[:2], dilation=spec.dilation,
        groups=spec.groups).numpy()
    scale = max(1.0, float(np.abs(ref).max()))
    try:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)
    except AssertionError as err:
        raise AssertionError(f"{label}: {spec}\n{err}") from None


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("name", SPARSE)
def test_random_convs_at_every_sparsity_match_pytorch(name: str, path: str) -> None:
    bits, registers = PATHS[path]
    for i, conv in enumerate(CONVS):
        spec = spec_of(conv)
        sparsity = SPARSITIES[i % len(SPARSITIES)]
        x, w = operands(spec, sparsity, seed=i)
        w[0] = 0  # a fully pruned filter: an empty row
        with forced_simd(bits, registers):
            got = run(name, spec, x, w)
        check(spec, got, x, w, f"{name} {path} sparsity {sparsity}")


def block_structured(spec: ConvSpec, rows: int, sparsity: float, seed: int) -> np.ndarray:
    """A weight whose aligned blocks of `rows` output channels share their zeros (what
    block pruning (rows, 1) leaves)."""
    rng = np.random.default_rng(seed)
    o, cg, kh, kw = spec.weight_shape
    w = rng.standard_normal(spec.weight_shape).astype(np.float32)
    keep = rng.random((o // rows, 1, cg, kh, kw)) >= sparsity
    return (w.reshape(o // rows, rows, cg, kh, kw) * keep).reshape(spec.weight_shape)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("rows", [2, 4, 8, 16])
def test_row_blocks_share_entries_and_match_pytorch(rows: int, path: str) -> None:
    bits, registers = PATHS[path]
    spec = spec_of((16, 32, 10, 10, 3, 1, 1, 1, 1))
    rng = np.random.default_rng(rows)
    x = rng.standard_normal(spec.data_shape).astype(np.float32)
    w = block_structured(spec, rows, 0.8, rows)
    assert row_block_of(w, spec) == min(rows, 8)
    for name in SPARSE:
        with forced_simd(bits, registers):
            got = run(name, spec, x, w)
        check(spec, got, x, w, f"{name} {path} blocks of {rows}")


def test_unstructured_weights_are_stored_one_row_per_entry() -> None:
    spec = spec_of((16, 32, 10, 10, 3, 1, 1, 1, 1))
    _, w = operands(spec, 0.8, 0)
    assert row_block_of(w, spec) == 1
    # a grouped conv's row blocks stay inside a group: 4 channels per group allow 4 at most
    grouped = spec_of((32, 32, 4, 4, 3, 1, 1, 1, 8))
    assert row_block_of(block_structured(grouped, 4, 0.5, 1), grouped) == 4
    depthwise = spec_of((16, 16, 10, 10, 3, 1, 1, 1, 16))
    assert row_block_of(np.ones(depthwise.weight_shape, np.float32), depthwise) == 1


#: Every decision forced: (vectors, rows, chunks, split, block); blocks over unstructured
#: weights store the union of their rows' columns (zeros included).
TILINGS = [(1, 1, 1, 1, 1), (1, 4, 2, 2, 1), (2, 8, 3, 2, 1), (4, 16, 1, 1, 1),
           (8, 2, 2, 1, 1), (2, 8, 2, 1, 4), (1, 16, 1, 1, 8), (4, 4, 3, 2, 2)]


@pytest.mark.parametrize("decisions", TILINGS, ids=["x".join(map(str, t)) for t in TILINGS])
def test_every_forced_tiling_matches_pytorch(decisions: tuple) -> None:
    vectors, rows, chunks, split, block = decisions
    for i, conv in enumerate([(16, 32, 12, 12, 3, 1, 1, 1, 1), (24, 48, 8, 8, 1, 1, 0, 1, 1),
                              (16, 32, 7, 7, 3, 2, 1, 1, 1)]):
        spec = spec_of(conv)
        x, w = operands(spec, 0.7, seed=10 + i)
        tiling = SparseTiling(16, vectors, rows, chunks, split, block)
        for name in SPARSE:
            with forced_tiling(tiling):
                got = run(name, spec, x, w)
            check(spec, got, x, w, f"{name} tiling {decisions}")


@pytest.mark.parametrize("plan", [direct_csr_plan, gemm_csr_plan, spatial_pack_csr_plan])
def test_constants_round_trip(plan) -> None:  # noqa: ANN001
    for i, conv in enumerate(CONVS):
        spec = spec_of(conv)
        if plan is direct_csr_plan and spec.strides != (1, 1):
            continue
        _, w = operands(spec, SPARSITIES[i % len(SPARSITIES)], seed=i)
        with TARGET:
            layout, tiling = plan(spec, w)
        grid = getattr(layout, "grid", layout)
        arrays = sparse_rows(w, spec, grid, tiling)
        np.testing.assert_array_equal(dense_from_rows(arrays, spec, grid), w)
        assert arrays[VALUES].shape[1:] == (tiling.split, tiling.block)
        assert len(arrays[ROW_PTR]) == spec.out_channels // tiling.block * tiling.chunks + 1


def test_tiling_choices() -> None:
    """Chunks shrink with density, tiles fit the registers with a row block, every thread
    gets a task."""
    spec = spec_of((64, 64, 16, 16, 3, 1, 1, 1, 1))
    with TARGET, forced_simd(512, 32):
        layout, _ = spatial_pack_csr_plan(spec)
        grid = layout.grid
        wide = choose_tiling(spec, grid)
        dense_rows = choose_tiling(spec, grid, entries_per_row=576.0)
        sparse_rows_ = choose_tiling(spec, grid, entries_per_row=20.0)
        blocked = choose_tiling(spec, grid, entries_per_row=60.0, block=8)
        stored = choose_tiling(spec, grid, entries_per_row=60.0, block=8, exact_block=True)
    assert wide.vectors * wide.lanes <= grid.padded
    assert sparse_rows_.chunks == 1 <= dense_rows.chunks
    assert 8 % blocked.block == 0 and blocked.vectors * blocked.block <= 16
    assert blocked.rows % blocked.block == 0 and spec.out_channels // blocked.rows >= 2
    assert stored.block == 8 and stored.vectors * stored.block <= 16


def test_a_row_block_is_tiled_in_the_part_that_feeds_most_fmas_per_load() -> None:
    """8-row blocks on AVX2 (8 accumulators): 2 vectors x 4 rows (6 loads per 8 FMAs),
    not 1 vector x 8 rows (9 per 8), which ran 1.2-1.8x slower on a Zen 3; unstructured
    rows keep the widest tile, and stored constants keep the block they were built with."""
    spec = spec_of((64, 64, 16, 16, 3, 1, 1, 1, 1))
    with TARGET, forced_simd(256, 16):
        grid = spatial_pack_csr_plan(spec)[0].grid
        blocked = choose_tiling(spec, grid, entries_per_row=100.0, block=8)
        unstructured = choose_tiling(spec, grid, entries_per_row=100.0)
        stored = choose_tiling(spec, grid, entries_per_row=100.0, block=8, exact_block=True)
    assert (blocked.vectors, blocked.block) == (2, 4)
    assert (unstructured.vectors, unstructured.block) == (8, 1)
    assert (stored.vectors, stored.block) == (1, 8)
    x, _ = operands(spec, 0.0, 3)
    w = block_structured(spec, 8, 0.8, 3)
    with forced_simd(256, 16):
        for name in SPARSE:
            check(spec, run(name, spec, x, w), x, w, f"{name} 8-row blocks as 4-row tiles")


def test_tiles_are_stored_in_the_output_only_where_the_grid_is_the_output() -> None:
    """GEMM's and spatial pack's grids are the output, so their tiles go straight into it;
    the direct layout's rows are padded, so its tiles go to a scratch grid, copied out; a
    last tile past the image does too (both paths are checked against PyTorch by the
    forced tilings above: 12x12 in tiles of 16 and of 32 pixels)."""
    spec = spec_of((64, 64, 16, 16, 3, 1, 1, 1, 1))
    odd = spec_of((16, 32, 12, 12, 3, 1, 1, 1, 1))
    with TARGET, forced_simd(512, 32):
        for plan in (gemm_csr_plan, spatial_pack_csr_plan):
            layout, tiling = plan(spec)
            assert writes_output(spec, grid_of(layout), tiling), plan.__name__
            layout, _ = plan(odd)
            assert writes_output(odd, grid_of(layout), replace(tiling, vectors=1))
            assert not writes_output(odd, grid_of(layout), replace(tiling, vectors=2))
        layout, tiling = direct_csr_plan(spec)
        assert not writes_output(spec, grid_of(layout), tiling)


def grid_of(layout: object) -> PixelGrid:
    """An algorithm plan's pixel grid (spatial pack's plan holds it in its packing)."""
    return getattr(layout, "grid", layout)  # type: ignore[return-value]


@pytest.mark.parametrize("name", SPARSE)
def test_a_task_lays_out_the_input_it_reads(name: str) -> None:
    """Each task pads/packs/im2cols what it reads, under the one parallel loop: every
    channel of its image in an ungrouped conv, its own channels in a depthwise one (laid
    out by a parallel stage of its own, a task read half of it from the other core's
    cache, and waited at two more barriers). A grouped conv whose tasks split a group
    keeps parallel layout stages, split by channel."""
    algorithm = registry.create("algorithms", name, {})
    cases = (((32, 32, 8, 8, 3, 1, 1, 1, 1), True), ((32, 32, 8, 8, 3, 1, 1, 1, 32), True),
             ((24, 24, 8, 8, 3, 1, 1, 1, 3), False))
    for conv, one_loop in cases:
        spec = spec_of(conv)
        _, w = operands(spec, 0.8, seed=3)
        with TARGET:
            func, _ = conv_prim_func(algorithm, spec, w)
        loops = func.script().count("T.parallel(")
        assert (loops == 1) == one_loop, (name, conv, func.script()[:3000])
        x, w = operands(spec, 0.8, seed=4)
        check(spec, run(name, spec, x, w), x, w, f"{name} laid out per task: {one_loop}")


def test_a_strided_copy_is_unrolled_and_a_contiguous_one_vectorized() -> None:
    """TVM loads a strided ramp lane by lane, so a copy stage that gathers along its
    innermost loop (a stride-2 conv's phase packing) is unrolled for LLVM's SLP
    vectorizer; a contiguous one is vectorized as before."""
    pad = te.placeholder((1, 4, 18, 18), name="pad")

    def packed(step: int) -> te.Tensor:
        return te.compute((1, 4, 3, 8, 8),
                          lambda n, c, kx, r, x: pad[n, c, r * step, x * step + kx],
                          name="planes")

    for step, kind in ((2, tirx.ForKind.UNROLLED), (1, tirx.ForKind.VECTORIZED)):
        planes = packed(step)
        sch = s_tir.Schedule(te.create_prim_func([pad, planes]))
        block = sch.get_sblock("planes")
        assert gathers_along(sch, block, sch.get_loops(block)[-1]) == (step > 1)
        with TARGET:
            vectorize_copy(sch, block, "float32")
        assert sch.get(sch.get_loops(block)[-1]).kind == kind, step
