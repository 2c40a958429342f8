"""The pixel-tile sparse kernel every NCHW CSR algorithm computes with (XNNPACK's SpMM).

Why it exists: the CSR row kernel that came before (`csr_kernel`, still the vector
layouts' block-CSR body) ran each stored weight over a whole output plane held in memory,
so every non-zero cost a load and a store per output pixel. At 90% unstructured sparsity
ResNet18-w0.5 then ran 1.47x *slower* than the dense model (Zen 3), and every verdict a
study drew on pruning described that kernel, not pruning.

The design is XNNPACK's sparse inference (Elsen, Dukhan, Gale, Simonyan, "Fast Sparse
ConvNets", CVPR 2020; `src/f32-spmm/`): activations stay channels-first, so one output
channel's pixels are contiguous. A register tile of `pixels` consecutive output positions
(`vectors` SIMD registers) of one output channel stays in registers while that channel's
non-zero weights stream past; each non-zero is broadcast and multiply-added into the tile
with one vector load per register, from an input position fixed at compile time:

    out[n, o, q] = sum_{e in row o} val[e] * in[n, off[e] + stride * q]

`off[e]` folds the weight's input channel and kernel tap into one element offset
(XNNPACK's `widx_dmap` holds the same as byte jumps), so the inner loop is load,
broadcast, FMA: no index decoding. XNNPACK makes only 1x1 convs sparse; here every conv
is, because each algorithm lays its input out so that a kernel tap is one offset
(`PixelGrid`, built by the algorithm):

* direct: the padded input in place, no copy. Grid rows are the padded width; the
  positions past the output width are computed and dropped. Strided convs read every
  `stride`-th element.
* GEMM: the im2col matrix; the grid is the output, exactly.
* spatial pack: the input packed once per (row phase, kernel column); a tap is a row
  offset into its packed plane, and the grid is the output, exactly.

A 1x1 stride-1 unpadded conv needs no copy in any of them: the input is read in place.

Around the tile (`SparseTiling`, chosen per conv by `choose_tiling`):

* `vectors`: the tile in SIMD registers; up to 8 accumulators hide the
  FMA latency and amortise a row entry's two scalar loads.
* `split`: a tile of 1-2 registers keeps `split` partial sums (a row's entries padded to
  a multiple of `split` with zero weights), so that consecutive FMAs do not wait on each
  other.
* `chunks`: the input channels are cut into chunks whose tile-sized input fits the L1
  cache. A row's entries are stored chunk by chunk, and all rows of a task take one chunk
  before the next, the tile's partial sum reloaded between chunks. Without it every row
  swept the whole input through L1 (4x4 images: 52 -> 37 us on a 256-channel conv).
* `rows`: output channels per parallel task; tasks run across threads, tiles inside them,
  so the fused epilogue runs on a task's rows while they are in cache.
* `block`: rows whose non-zeros share their columns (block pruning) are stored once, one
  offset and `block` values an entry, and tiled together: one input load, `block` FMAs.
* `merge`, `order`: stored chunks taken as one, and whether tiles or chunks are the outer
  loop of a task: decisions only the tuning layer changes (`spmm_rebuild`).

Measured per conv at 90% unstructured sparsity (Xeon Cascade Lake, 2 threads; each CSR
conv function, its input layout stage included, against dlas's dense NCHWc direct
micro-kernel, interleaved in one process): ResNet18-w0.5's 3x3 convs 1.7-2.3x at 32x32
(in place best), 3.5x at 16x16, 3.2x at 8x8, 2.3x at 4x4 (spatial pack best, 28-45
GFLOP/s of non-zero work); MobileNetV2-w0.5's 1x1 convs 1.7-3.1x, its depthwise convs
0.8-1.1x (nine taps a row leave nothing to amortise a tile over).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .base import ConvSpec
from .spmm_tiling import PixelGrid, SparseTiling, built_json, misfit, stored_tiling

#: Names of the kernel's CSR constants: values, element offsets, row pointers.
VALUES, OFFSETS, ROW_PTR = "csr_data", "csr_offsets", "csr_indptr"
def sparse_rows(weight: np.ndarray, spec: ConvSpec, grid: PixelGrid, tiling: SparseTiling
                ) -> dict[str, np.ndarray]:
    """The kernel's CSR constants of an OIHW weight (numpy, compile time).

    Rows are blocks of `tiling.block` output channels; a row block stores every column
    some of its channels keeps (all of them keep the same ones under block pruning, so no
    zero is stored then), chunk by chunk of in-group input channels:
    `ROW_PTR[b * chunks + k]` starts chunk k of row block b. An entry is the element
    offset its input channel and tap read at grid position 0 (`PixelGrid`) and one value
    per channel of the block. Every (row block, chunk) segment is padded with zero
    weights at offset 0 to a multiple of `split`; values are stored (entries / split,
    split, block), which is how the compute reads split and block back. An empty row
    needs no stored zero: the kernel initialises its tile before the loop.
    """
    out_channels, cg, kh, kw = weight.shape
    block, split, chunks = tiling.block, tiling.split, tiling.chunks
    per_group = out_channels // spec.groups
    chunk = -(-cg // chunks)
    taps = np.asarray(grid.taps, dtype=np.int64)
    blocks = weight.reshape(out_channels // block, block, cg, kh * kw)
    kept = (blocks != 0).any(axis=1)  # (row blocks, cg, taps): the block's columns
    rows, channels, tap_index = np.nonzero(kept)
    absolute = rows * block // per_group * cg + channels
    offsets = absolute * grid.channel + taps[tap_index]
    values = blocks[rows, :, channels, tap_index]  # (entries, block)
    segment = rows * chunks + channels // chunk
    counts = np.bincount(segment, minlength=out_channels // block * chunks)
    padded = -(-counts // split) * split
    ptr = np.concatenate([[0], np.cumsum(padded)])
    # each entry's slot: its segment's start plus its rank within the segment
    starts = np.concatenate([[0], np.cumsum(counts)])[:-1]
    slots = ptr[:-1][segment] + (np.arange(len(segment)) - starts[segment])
    data = np.zeros((int(ptr[-1]), block), dtype=weight.dtype)
    where = np.zeros(int(ptr[-1]), dtype=np.int64)
    data[slots] = values
    where[slots] = offsets
    if where.max(initial=0) >= 2**31 or ptr[-1] >= 2**31:
        raise ValueError(f"sparse conv too large for int32 offsets: {spec}")
    return {VALUES: np.ascontiguousarray(data.reshape(-1, split, block)),
            OFFSETS: where.astype(np.int32).reshape(-1, split), ROW_PTR: ptr.astype(np.int32)}


def dense_from_rows(arrays: dict[str, np.ndarray], spec: ConvSpec, grid: PixelGrid
                    ) -> np.ndarray:
    """The OIHW weight back from `sparse_rows`' arrays (tests and debugging)."""
    out_channels, cg, kh, kw = spec.weight_shape
    per_group = out_channels // spec.groups
    block = arrays[VALUES].shape[2]
    tap_of = {offset: t for t, offset in enumerate(grid.taps)}
    weight = np.zeros(spec.weight_shape, dtype=arrays[VALUES].dtype)
    ptr = arrays[ROW_PTR]
    chunks = (len(ptr) - 1) // (out_channels // block)
    values = arrays[VALUES].reshape(-1, block)
    offsets = arrays[OFFSETS].reshape(-1)
    for b in range(out_channels // block):
        lo, hi = ptr[b * chunks], ptr[(b + 1) * chunks]
        for entry, offset in zip(values[lo:hi], offsets[lo:hi], strict=True):
            if not entry.any():
                continue
            absolute, within = divmod(int(offset), grid.channel)
            c = absolute - b * block // per_group * cg
            ky, kx = divmod(tap_of[within], kw)
            weight[b * block:(b + 1) * block, c, ky, kx] = entry
    return weight


def spmm_stage(name: str, inp: te.Tensor, val: te.Tensor, off: te.Tensor, ptr: te.Tensor,
               spec: ConvSpec, grid: PixelGrid, tiling: SparseTiling) -> te.Tensor:
    """The conv's NCHW output, computed by the kernel (block `name`) over `inp`, the
    algorithm's input layout (batch first).

    `te.extern` with the kernel's own buffers, not `te.extern_primfunc`: the latter finds
    a kernel's inputs by what it indexes, and this kernel indexes its input only through
    a flat view.
    """
    tiling = stored_tiling(tiling, val, ptr, spec)
    kernel = spmm_kernel(name, spec, grid, tiling, shapes=(inp, val, off, ptr))
    buffers = list(kernel.params)  # TVM 0.27: a PrimFunc's params are its buffers
    return te.extern([spec.out_shape], [inp, val, off, ptr],
                     lambda ins, outs: kernel.body, in_buffers=buffers[:-1],
                     out_buffers=[buffers[-1]], name="extern")


#: Block annotation: the grid and tiling a kernel block was built with (JSON), which is
#: what `spmm_rebuild` needs to build it again with other decisions.
BUILT_ATTR = "dlas.spmm"


def spmm_kernel(name: str, spec: ConvSpec, grid: PixelGrid, tiling: SparseTiling, *,
                shapes: tuple[te.Tensor, ...] | None = None,
                buffers: tuple[tirx.Buffer, ...] | None = None) -> tirx.PrimFunc:
    """The kernel as TIR: one block per (image, task of `rows` output channels) writing
    those rows of the NCHW output; inside, tiles, chunks and rows (in `tiling.order`;
    see the module doc), into a scratch grid of the task's rows, then the grid's output
    pixels copied out row by row.

    Its buffers (input, values, offsets, row pointers, output) are new ones of the TE
    tensors' `shapes`, or the given `buffers` (a block built again in place,
    `spmm_rebuild`). The input is read through a flat view of each image (`decl_buffer`
    over the same data), which makes a tap one offset whatever the layout's shape.

    Where the grid is the output exactly (`writes_output`: GEMM, spatial pack and every
    1x1 conv), tiles are stored straight into the output, with plain (n, o, y, x)
    indices. Elsewhere (the direct layout's padded rows) they go to a scratch grid of the
    block's own (a flat view of a buffer outside it would break when TVM compacts that
    buffer to a task's region), copied out row by row. Plain indices in both let the
    fused epilogue be computed per task. The scratch and its copy cost a sparse conv
    whose output outweighs its work: MobileNetV2-w0.5's 8->48 expansion at 32x32 wrote
    its output three times (18.9 us of 0.08 MFLOP, Cascade Lake).
    """
    batch, out_channels = spec.batch, spec.out_channels
    _, _, oh, ow = spec.out_shape
    acc = spec.out_dtype
    tiles = tiling.tiles(grid)
    plane = tiles * tiling.pixels
    why = misfit(grid, tiling)
    if why is not None:
        raise ValueError(why)
    with IRBuilder() as builder, T.prim_func(s_tir=True):
        T.func_name("kernel")
        names = ["Input", "Val", "Off", "Ptr", "Out"]
        if buffers is not None:
            data, values, offsets, starts, out = [T.arg(n.lower(), b)
                                                  for n, b in zip(names, buffers, strict=True)]
        else:
            assert shapes is not None
            inp, val, off, ptr = shapes
            handles = [T.arg(arg, T.handle()) for arg in ("p", "v", "c", "r", "o")]
            data, values, offsets, starts, out = IRBuilder.name_many(names, [
                T.match_buffer(handles[0], inp.shape, inp.dtype),
                T.match_buffer(handles[1], val.shape, val.dtype),
                T.match_buffer(handles[2], off.shape, "int32"),
                T.match_buffer(handles[3], ptr.shape, "int32"),
                T.match_buffer(handles[4], spec.out_shape, acc)])
        rows = tiling.rows
        with T.grid(batch, out_channels // rows) as (n, task), T.sblock(name):
            vn, vt = T.axis.remap("SS", [n, task])
            T.sblock_attr({BUILT_ATTR: built_json(grid, tiling)})
            image = int(np.prod([int(d) for d in data.shape[1:]]))
            groups, split, block = (int(d) for d in values.shape)
            chunks = tiling.chunks
            T.reads(data[(vn, *(slice(0, int(d)) for d in data.shape[1:]))],
                    values[0:groups, 0:split, 0:block], offsets[0:groups, 0:split],
                    starts[0:out_channels // block * chunks + 1])
            T.writes(out[vn, vt * rows:vt * rows + rows, 0:oh, 0:ow])
            lanes = tiling.pixels
            tile = T.alloc_buffer((split, block, lanes), acc, scope="local")
            direct = writes_output(spec, grid, tiling)
            scratch = None if direct else T.alloc_buffer((rows * plane,), acc)
            flat = T.decl_buffer((batch * image,), data.dtype, data=data.data)
            kernel = _Kernel(spec, grid, tiling, flat, values, offsets, starts, tile,
                             _Partial(scratch, out, vn, vt * rows, plane, ow), vn, vt, image)
            outer, inner = (tiles, chunks // tiling.merge)
            if tiling.order == "chunks":
                outer, inner = inner, outer
            with T.serial(outer) as a, T.serial(inner) as b, T.serial(rows // block) as r:
                t, k = (a, b) if tiling.order == "tiles" else (b, a)
                kernel.step(t, k, r)
            if scratch is not None:
                with T.serial(rows) as r, T.serial(oh) as y, T.vectorized(ow) as x:
                    T.buffer_store(out, scratch[r * plane + y * grid.width + x],
                                   [vn, vt * rows + r, y, x])
    return builder.get()


def task_channels(spec: ConvSpec, rows: int) -> int | None:
    """Input channels each task of `rows` output channels reads, where its rows are whole
    groups (task t then reads channels [t * that, (t + 1) * that) of every layout, whose
    axis 1 is the input channel); None where every task reads every channel (`groups` 1,
    or a task that splits a group). The kernel still declares the whole input read: a
    narrower region would let TVM compact the layout buffer to it, under the kernel's
    flat view (`spmm_kernel`)."""
    per_group = spec.out_channels // spec.groups
    if spec.groups == 1 or rows % per_group:
        return None
    return rows // per_group * spec.weight_shape[1]


def writes_output(spec: ConvSpec, grid: PixelGrid, tiling: SparseTiling) -> bool:
    """Whether the kernel's tiles are the output's pixels exactly (rows of the output's
    width, whole tiles ending with the image), so they can be stored in place."""
    _, _, oh, ow = spec.out_shape
    return grid.width == ow and tiling.tiles(grid) * tiling.pixels == oh * ow


@dataclass
class _Partial:
    """Where a task's tiles are stored (and, between chunks, reloaded): its rows of the
    scratch grid, or of the output itself (`scratch` None; see `spmm_kernel`)."""

    scratch: tirx.Buffer | None
    out: tirx.Buffer
    vn: tirx.Var
    first_row: tirx.Expr
    plane: int
    width: int

    def load(self, row: tirx.Expr, position: tirx.Expr) -> tirx.Expr:
        if self.scratch is not None:
            return self.scratch[row * self.plane + position]
        return self.out[self.vn, self.first_row + row, position // self.width,
                        position % self.width]

    def store(self, value: tirx.Expr, row: tirx.Expr, position: tirx.Expr) -> None:
        if self.scratch is not None:
            T.buffer_store(self.scratch, value, [row * self.plane + position])
        else:
            T.buffer_store(self.out, value, [self.vn, self.first_row + row,
                                             position // self.width, position % self.width])


@dataclass
class _Kernel:
    """What the kernel's tile step reads and writes (see `spmm_kernel`)."""

    spec: ConvSpec
    grid: PixelGrid
    tiling: SparseTiling
    flat: tirx.Buffer
    values: tirx.Buffer
    offsets: tirx.Buffer
    starts: tirx.Buffer
    accumulators: tirx.Buffer
    partial: _Partial
    vn: tirx.Var
    vt: tirx.Var
    image: int

    def step(self, t: tirx.Var, k: tirx.Var, r: tirx.Var) -> None:
        """One tile of one row block over chunk k (`merge` stored chunks): start it (zero,
        or the earlier chunks' partial sums), its row block's entries of the chunk, store
        it."""
        tiling, spec = self.tiling, self.spec
        acc, lanes, split = spec.out_dtype, tiling.pixels, tiling.split
        block, merge = tiling.block, tiling.merge
        segment = ((self.vt * tiling.rows) // block + r) * tiling.chunks + k * merge
        at = t * lanes
        _init_tile(self.accumulators, self.partial, r * block, at,
                   tiling.chunks // merge, k, split, block, lanes, acc)
        begin = self.starts[segment] // split
        with T.serial(self.starts[segment + merge] // split - begin) as j:
            with (T.unroll(split) as u, T.unroll(block) as i, T.vectorized(lanes) as p):
                element = self.flat[self.vn * self.image + self.offsets[begin + j, u]
                                    + self.grid.stride * (at + p)]
                T.buffer_store(self.accumulators, self.accumulators[u, i, p]
                               + _widen(self.values[begin + j, u, i], self.values.dtype, acc)
                               * _widen(element, self.flat.dtype, acc), [u, i, p])
        with T.unroll(block) as i, T.vectorized(lanes) as p:
            total = self.accumulators[0, i, p]
            for u in range(1, split):
                total = total + self.accumulators[u, i, p]
            self.partial.store(total, r * block + i, at + p)


def holds_spmm_kernel(func: tirx.PrimFunc) -> bool:
    """Whether one of `func`'s top-level blocks is a pixel-tile kernel."""
    sch = s_tir.Schedule(func)
    root = sch.get_sblock(func.body.block.name_hint)
    return any(BUILT_ATTR in sch.get(block).annotations for block in sch.get_child_blocks(root))


def _widen(value: tirx.Expr, dtype: str, acc: str) -> tirx.Expr:
    """`value` (of `dtype`) in the accumulation dtype; float32 IR stays cast-free."""
    return value if dtype == acc else T.cast(value, acc)


def _init_tile(tile: tirx.Buffer, partial: _Partial, row: tirx.Expr, at: tirx.Expr,
               chunks: int, chunk: tirx.Var, split: int, block: int, lanes: int,
               acc: str) -> None:
    """Zero the tile, or (after the first chunk) start each row's first sum at the
    partial sum the earlier chunks stored (rows `row + i`, positions from `at`)."""
    zero = tirx.const(0, acc)
    with T.unroll(split) as u, T.unroll(block) as i, T.vectorized(lanes) as p:
        if chunks == 1:
            T.buffer_store(tile, zero, [u, i, p])
        else:
            earlier = partial.load(row + i, at + p)
            T.buffer_store(tile, tirx.Select(tirx.all(chunk > 0, u == 0), earlier, zero),
                           [u, i, p])


__all__ = [
    "BUILT_ATTR",
    "OFFSETS",
    "ROW_PTR",
    "VALUES",
    "holds_spmm_kernel",
    "sparse_rows",
    "spmm_kernel",
    "spmm_stage",
    "task_channels",
    "writes_output",
]
