"""The one CSR row kernel every CSR algorithm computes with (as TOPI routes every conv2d
variant through one body).

A CSR conv is, for each output row (n, o), a sum over that row's stored weights:

    out[n, o, *tile, *pixel] = sum_{j < ptr[o+1]-ptr[o]} val[ptr[o]+j] * input[index(k)]

with k = col[ptr[o]+j] a column of the (O, Cg*KH*KW) weight matrix. What differs between
the algorithms is only the data layout: the input they read (padded NCHW for direct, the
im2col matrix for GEMM, packed tiles for spatial pack), which input element column k
meets at an output position (`CSRRowLayout.index`), and the output's spatial loops: all
inside the loop over non-zeros (direct, GEMM: y, x), or tiles outside it and the tile's
pixels inside (spatial pack: ht, wt outside, vh, vw inside).

The kernel is TIR, not TE, because its reduction extent is read from `ptr`; TE's nesting
cannot put that loop outside the spatial ones. It has one block per (n, o) row (named
`row_name`), holding an update block (`update_name`) whose loop over the row's non-zeros
is outside its pixel loops; `dlas.algorithms.schedule_util.schedule_csr_rows` and the
tuning layer's sparse space schedule exactly this shape. The builder emits IR
structurally equal to (and printing the same as) the hand-written TVMScript kernels it
replaced, so MetaSchedule workloads, keyed by structural hash, are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

#: (n, o, k, tile vars, pixel vars) -> index of the input element that weight column k
#: multiplies at that output position; k is the TIR expression col[ptr[o] + j].
InputIndex = Callable[
    [tirx.Var, tirx.Var, tirx.Expr, Sequence[tirx.Var], Sequence[tirx.Var]],
    tuple[tirx.Expr, ...],
]


@dataclass(frozen=True)
class CSRRowLayout:
    """How one algorithm's CSR kernel lays out its output and reads its input.

    The output is (N, O, *tiles, *pixels): `tiles` are spatial loops outside the loop
    over a row's non-zeros, `pixels` those inside it, each as loop name -> extent (the
    names, like the input buffer's, only make the printed IR readable). `index` maps
    an output position and weight column to the input element (see `InputIndex`).

    `lanes` > 0 makes it block-CSR over output-channel vectors (the vector layouts): a
    row is `lanes` output channels, each stored entry a vector of `lanes` weights
    (`val` is (nnz, lanes)), and the last pixel loop is the lane, which picks the weight.
    """

    row_name: str
    update_name: str
    input_name: str
    tiles: Mapping[str, int]
    pixels: Mapping[str, int]
    index: InputIndex
    lanes: int = 0


def csr_row_kernel(layout: CSRRowLayout, out_shape: tuple[int, int], acc: str,
                   inp: te.Tensor, val: te.Tensor, col: te.Tensor,
                   ptr: te.Tensor) -> tirx.PrimFunc:
    """The CSR row kernel (inp, val, col, ptr) -> out for `te.extern` (see module doc).

    `out_shape` is (N, O); the rest of the output's shape is the layout's tiles and
    pixels, in `acc` (the accumulation dtype). Input buffers take the TE tensors' own
    shape objects (te.extern requires it). Every row reads the whole of its image's
    input (`inp[n, ...]`) and all of `val`/`col`: which entries is data-dependent.
    """
    n_, o_ = out_shape
    nnz = int(val.shape[0])
    rest = (*layout.tiles.values(), *layout.pixels.values())
    with IRBuilder() as builder, T.prim_func(s_tir=True):
        T.func_name("kernel")
        handles = [T.arg(name, T.handle()) for name in ("p", "v", "c", "r", "o")]
        data, values, columns, rows, out = IRBuilder.name_many(
            [layout.input_name, "Val", "Col", "Ptr", "Out"],
            [T.match_buffer(handles[0], inp.shape, inp.dtype),
             T.match_buffer(handles[1], val.shape, val.dtype),
             T.match_buffer(handles[2], col.shape, "int32"),
             T.match_buffer(handles[3], ptr.shape, "int32"),
             T.match_buffer(handles[4], (n_, o_, *rest), acc)])
        with T.grid(n_, o_) as (n, oc), T.sblock(layout.row_name):
            IRBuilder.name_many(["n", "oc"], [n, oc])
            vn, vo = IRBuilder.name_many(["vn", "vo"], T.axis.remap("SS", [n, oc]))
            vals = values[0:nnz, 0:layout.lanes] if layout.lanes else values[0:nnz]
            T.reads(data[(vn, *(slice(0, int(d)) for d in inp.shape[1:]))],
                    vals, columns[0:nnz], rows[vo:vo + 2])
            T.writes(out[(vn, vo, *(slice(0, d) for d in rest))])
            _row_update(layout, acc, data, values, columns, rows, out, vn, vo)
    return builder.get()


def _row_update(layout: CSRRowLayout, acc: str, data: tirx.Buffer, values: tirx.Buffer,
                columns: tirx.Buffer, rows: tirx.Buffer, out: tirx.Buffer,
                vn: tirx.Var, vo: tirx.Var) -> None:
    """The update block of one row: tiles, then the row's non-zeros, then pixels."""
    names = [*layout.tiles, "j", *layout.pixels]
    extents = [*layout.tiles.values(), rows[vo + 1] - rows[vo], *layout.pixels.values()]
    nt = len(layout.tiles)
    with T.grid(*extents) as loops, T.sblock(layout.update_name):
        loops = IRBuilder.name_many(names, [loops] if isinstance(loops, tirx.Var) else loops)
        axes = [T.axis.reduce(extent, loop) if i == nt else T.axis.spatial(extent, loop)
                for i, (extent, loop) in enumerate(zip(extents, loops, strict=True))]
        IRBuilder.name_many([f"v{name}" for name in names], axes)
        tiles, vj, pixels = axes[:nt], axes[nt], axes[nt + 1:]
        at = (vn, vo, *tiles, *pixels)
        with T.init():
            T.buffer_store(out, T.cast(0, acc), at)
        k = columns[rows[vo] + vj]
        element = data[layout.index(vn, vo, k, tiles, pixels)]
        value = values[rows[vo] + vj, pixels[-1]] if layout.lanes else values[rows[vo] + vj]
        T.buffer_store(out, out[at] + T.cast(value, acc) * T.cast(element, acc), at)
