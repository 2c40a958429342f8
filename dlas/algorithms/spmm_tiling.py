"""The pixel-tile sparse kernel's decisions: the grid an algorithm lays a conv's input out
on (`PixelGrid`), the tiling chosen for it (`SparseTiling`, `choose_tiling`), what a
tiling must satisfy to compute the conv (`misfit`), and the annotation that records both
on a kernel block (`built_json`, `built_of`).

Why apart from the kernel (`spmm_kernel`, which builds the TIR): the algorithms plan a
conv's layout from these before any kernel exists, and the tuning layer's requests
(`spmm_rebuild`) are checked against them. What each decision means is the kernel
module's doc.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
from tvm import te
from tvm.runtime import DataType
from tvm.target import Target

from ..tir.schedule_helpers import target_simd
from .base import ConvSpec

#: The tile sizes in SIMD registers: powers of two (LLVM's code for a 6- or 12-register
#: vector ran 10-20x slower here), up to 8 (8 accumulators cover 4-cycle FMAs on 2 ports).
TILE_VECTORS = (1, 2, 4, 8)
#: Most output channels one stored entry serves (`SparseTiling.block`).
MAX_ENTRY_ROWS = 8
#: Input bytes one chunk of channels may touch per tile (about an L1 data cache).
CHUNK_BYTES = 32 * 1024
#: Fewest entries per (row, chunk) segment worth a chunk: each segment reloads and
#: stores its tile.
MIN_SEGMENT = 16
#: An entry's scalar work per tile (its value and offset, loop), in vector FMAs.
ENTRY_COST = 2


@dataclass(frozen=True)
class PixelGrid:
    """How an algorithm lays out its input for the kernel, and where outputs sit.

    Output pixel (y, x) is grid position q = y * width + x; at position q, the weight of
    in-group input channel c and kernel tap (ky, kx) meets input element
    `c' * channel + taps[ky * KW + kx] + stride * q` of the image's flat input, with c'
    the absolute input channel. `positions` covers every output pixel (grid positions past
    the output width are computed and dropped); `padded` is what the tiles compute, and
    the layout must keep every read of those positions inside the image.
    """

    positions: int
    padded: int
    width: int
    stride: int
    channel: int
    taps: tuple[int, ...]

    def touched(self, pixels: int) -> int:
        """Elements of one channel a tile of `pixels` positions reads: the union of each
        tap's window (the direct layout's taps overlap, the packed ones do not)."""
        span = self.stride * (pixels - 1) + 1
        total, end = 0, None
        for start in sorted(set(self.taps)):
            stop = start + span
            if end is None or start >= end:
                total += span
            else:
                total += max(0, stop - end)
            end = stop if end is None else max(end, stop)
        return total


@dataclass(frozen=True)
class SparseTiling:
    """The kernel's decisions for one conv (see the module doc)."""

    lanes: int
    vectors: int
    rows: int
    chunks: int
    split: int
    #: Output channels per stored entry: rows whose non-zeros share their columns (block
    #: pruning) are stored once per block, each entry `block` values and one offset, and
    #: the tile holds `block` rows, so one input load feeds `block` FMAs.
    block: int = 1
    #: Stored chunks the kernel takes as one (a row's chunks are contiguous, so any
    #: divisor of `chunks` reads the same constants): the tuning layer's channel block.
    merge: int = 1
    #: Loop order in a task: "tiles" (each tile through every chunk and row) or "chunks"
    #: (each chunk through every tile and row).
    order: str = "tiles"

    @property
    def pixels(self) -> int:
        return self.lanes * self.vectors

    def tiles(self, grid: PixelGrid) -> int:
        """Tiles that cover the grid's output positions."""
        return -(-grid.positions // self.pixels)


def misfit(grid: PixelGrid, tiling: SparseTiling) -> str | None:
    """Why the kernel cannot be built with `tiling` over `grid` and compute the conv
    (None: it can). Its tiles must lie inside the positions the input is laid out for,
    and `merge` must divide the stored chunks: the loop takes `chunks // merge` merged
    chunks, so a remainder would be skipped with its non-zeros. (A tuner's decision
    replayed from another conv's choices once asked for that, and the kernel computed
    another function, 12-23x faster than the real one.)"""
    plane = tiling.tiles(grid) * tiling.pixels
    if plane > grid.padded:
        return (f"tiles of {tiling.pixels} positions need {plane} grid positions; the "
                f"input is laid out for {grid.padded}")
    if tiling.merge < 1 or tiling.chunks % tiling.merge:
        return (f"merge {tiling.merge} does not divide the {tiling.chunks} stored chunks "
                "of a row block: the kernel would skip chunks")
    return None


#: The tiling a test or the tuning layer forces instead of `choose_tiling`'s.
_FORCED: list[SparseTiling | None] = [None]


def accumulator_lanes(spec: ConvSpec) -> int:
    """SIMD lanes of the accumulator dtype on the current target."""
    return max(target_simd().bits // DataType(spec.out_dtype).bits, 1)


def target_threads() -> int:
    """Threads the current target's code runs on (`num-cores`; 1 when unset)."""
    target = Target.current(allow_none=True)
    if target is None:
        return 1
    cores = target.attrs.get("num-cores")
    return max(int(cores), 1) if cores is not None else 1


def reads_in_place(spec: ConvSpec, padded: int) -> bool:
    """Whether the kernel reads the conv's input as it is: a 1x1 stride-1 unpadded conv
    whose tiles end with the image needs no layout stage in any algorithm."""
    _, _, oh, ow = spec.out_shape
    return (spec.kernel_size == (1, 1) and spec.strides == (1, 1) and not any(spec.padding)
            and padded == oh * ow)


def padded_positions(positions: int, pixels: int) -> int:
    """`positions` rounded up to whole tiles."""
    return -(-positions // pixels) * pixels


def choose_tiling(spec: ConvSpec, grid: PixelGrid, entries_per_row: float | None = None,
                  block: int = 1, *, exact_block: bool = False) -> SparseTiling:
    """The tiling of `spec` on the current target (see the module doc for each choice).

    vectors and block: the weight's row blocks share their columns over `block` rows, so
    the kernel may take them `block` at a time or in any power-of-two part of that
    (`exact_block`: only `block`, what stored constants were built with). Per stored entry
    a tile costs its `vectors` input loads, `ENTRY_COST` of scalar work (offset, first
    value) and one broadcast per further row, shared by the rows it serves: the pair with
    the fewest tiles x (vectors + `ENTRY_COST` + block - 1) / block wins, among tiles whose
    rows fit the accumulator budget (half the SIMD registers); ties go to fewer padded
    positions, then the larger block (fewer stored entries), then the smaller tile.
    Measured (AMD EPYC Zen 3, AVX2, 2 threads, ResNet18-w0.5's 3x3 convs with 8x1 blocks
    at 80%, in place at 32x32 and over spatial pack's planes below, as `mixed_csr` takes
    them): a tile of 1 vector x 8 rows, eight broadcasts per input load, took 104, 69, 57
    and 64 us at 32x32, 16x16, 8x8 and 4x4 where 2 vectors x 4 rows took 60, 49, 52 and
    53. split: 2 when the tile has at most 2 accumulators. chunks: in-group channels
    per chunk so a tile's input of one chunk stays within `CHUNK_BYTES`, but no more
    chunks than keep `MIN_SEGMENT` entries in each of a row's (known when the weight is:
    `entries_per_row`). rows: the largest multiple of the block dividing the output
    channels that leaves every thread a task: each task lays out its input itself
    (`spmm_schedule.localize_layout`), so fewer tasks lay it out fewer times, and a
    task's rows share each chunk of its tile's input while it is in L1 (ResNet18's 8x8
    convs: 50.9 us at 16 rows, 44.2 at 64).
    """
    lanes = accumulator_lanes(spec)
    budget = max(target_simd().registers // 2, 1)
    parts = [block] if exact_block else [b for b in (1, 2, 4, 8) if block % b == 0]
    best: tuple[float, int, int, int, int] | None = None
    for rows_per_entry in parts:
        for vectors in TILE_VECTORS:
            if vectors * rows_per_entry > budget and vectors > 1:
                continue
            tiles = -(-grid.positions // (lanes * vectors))
            cost = tiles * (vectors + ENTRY_COST + rows_per_entry - 1) / rows_per_entry
            key = (cost, tiles * vectors, -rows_per_entry, vectors, rows_per_entry)
            if best is None or key < best:
                best = key
    assert best is not None
    vectors, block = best[3], best[4]
    split = 2 if vectors * block <= 2 else 1
    cg = spec.weight_shape[1]
    per_channel = grid.touched(lanes * vectors) * DataType(spec.data_dtype).bits // 8
    per_chunk = max(1, CHUNK_BYTES // max(per_channel, 1))
    chunks = -(-cg // per_chunk)
    if entries_per_row is not None:
        chunks = max(1, min(chunks, int(entries_per_row // MIN_SEGMENT)))
    out_channels = spec.out_channels
    threads = target_threads()
    rows = block
    for candidate in range(block, out_channels + 1, block):
        if out_channels % candidate == 0 and spec.batch * out_channels // candidate >= threads:
            rows = candidate
    return SparseTiling(lanes=lanes, vectors=vectors, rows=rows, chunks=chunks, split=split,
                        block=block)


def row_block_of(weight: np.ndarray, spec: ConvSpec) -> int:
    """The most output channels, up to `MAX_ENTRY_ROWS`, whose aligned blocks share their
    non-zero columns in `weight` (1 when none do: unstructured sparsity). Rows of one
    block must read the same input, so a block stays within a group."""
    per_group = spec.out_channels // spec.groups
    matrix = weight.reshape(weight.shape[0], -1) != 0
    for block in (MAX_ENTRY_ROWS, 8, 4, 2):
        if block > MAX_ENTRY_ROWS or per_group % block:
            continue
        blocks = matrix.reshape(-1, block, matrix.shape[1])
        if (blocks == blocks[:, :1]).all():
            return block
    return 1


def plan(spec: ConvSpec, grid_for: Callable[[int], PixelGrid],
         weight: np.ndarray | None = None, block: int | None = None
         ) -> tuple[PixelGrid, SparseTiling]:
    """The grid and tiling of `spec`: `grid_for(padded)` lays the input out for `padded`
    grid positions; the tiling is chosen on a first draft, then the grid is laid out for
    whole tiles.

    With the weight (compile-time constants) its row blocks (`row_block_of`, which bound
    the kernel's block) and density (which bounds `chunks`) are read from it; the compute
    gets the block the constants were stored with from their shapes instead, and reads
    the chunks back too (`stored_tiling`), so both choose the same tile.
    """
    entries = None
    if weight is not None:
        block = row_block_of(weight, spec)
        entries = np.count_nonzero(weight) / max(spec.out_channels, 1)
    draft = grid_for(padded_positions(grid_for(1).positions, accumulator_lanes(spec)))
    tiling = _FORCED[0] or choose_tiling(spec, draft, entries, block or 1,
                                         exact_block=weight is None)
    return grid_for(padded_positions(draft.positions, tiling.pixels)), tiling


def stored_tiling(tiling: SparseTiling, val: te.Tensor, ptr: te.Tensor, spec: ConvSpec
                  ) -> SparseTiling:
    """`tiling` with the split, block and chunks the constants were stored with
    (`sparse_rows`): values are (groups, split, block), row pointers one per (row block,
    chunk)."""
    split, block = int(val.shape[1]), int(val.shape[2])
    chunks = (int(ptr.shape[0]) - 1) // (spec.out_channels // block)
    return replace(tiling, chunks=chunks, split=split, block=block)


class forced_tiling:  # noqa: N801 - used as a context manager, like `forced_simd`
    """Inside, every sparse conv takes `tiling` (tests: every path on any machine)."""

    def __init__(self, tiling: SparseTiling) -> None:
        self.tiling = tiling

    def __enter__(self) -> SparseTiling:
        self.previous = _FORCED[0]
        _FORCED[0] = self.tiling
        return self.tiling

    def __exit__(self, *exc: object) -> None:
        _FORCED[0] = self.previous


def built_json(grid: PixelGrid, tiling: SparseTiling) -> str:
    """The `BUILT_ATTR` annotation: grid and tiling as JSON."""
    return json.dumps({"grid": asdict(grid), "tiling": asdict(tiling)}, sort_keys=True)


def built_of(annotation: str) -> tuple[PixelGrid, SparseTiling]:
    """The grid and tiling a `BUILT_ATTR` annotation holds."""
    raw = json.loads(annotation)
    grid = raw["grid"]
    return (PixelGrid(**{**grid, "taps": tuple(grid["taps"])}), SparseTiling(**raw["tiling"]))
