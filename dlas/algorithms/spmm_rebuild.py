"""The pixel-tile sparse kernel built again with the decisions a tuner asked for.

MetaSchedule records a candidate as a trace of schedule primitives, but the sparse
kernel's decisions (`dlas.algorithms.spmm_tiling.SparseTiling`: its tile size, how many
stored chunks it takes at once, the order of its tile and chunk loops) shape the body of
one opaque block, which no primitive changes. So the tuning layer's sparse space samples
them (`sample_categorical`, which MetaSchedule mutates and replays like any decision) and
writes them on the kernel block as annotations (`REQUESTS`); before code generation,
`rebuild_requested` builds every block so annotated again with those decisions: the same
buffers, the same iteration and annotations, a new body. It runs in the tuner's builder
and in the model's compile alike, so a database record means the same kernel in both.

The decisions a search may take (`choices`) read the same constants the block was
compiled with: tiles whose positions fit the input's layout and whose accumulators fit
the registers, divisors of the stored chunks, either loop order.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import tvm
from tvm import s_tir, tirx

from ..tir.conv_spec import CONV_SPEC_ATTR, ConvSpec
from ..tir.schedule_helpers import target_simd
from .spmm_kernel import BUILT_ATTR, spmm_kernel
from .spmm_tiling import (
    TILE_VECTORS,
    PixelGrid,
    SparseTiling,
    built_json,
    built_of,
    misfit,
)

log = logging.getLogger(__name__)

#: Block annotations a tuner sets, by the `SparseTiling` field each asks for.
REQUESTS = {"vectors": "dlas.spmm.vectors", "merge": "dlas.spmm.merge",
            "order": "dlas.spmm.order"}
#: The loop orders, by the integer the `order` request holds.
ORDERS = ("tiles", "chunks")


def choices(grid: PixelGrid, tiling: SparseTiling) -> dict[str, list[int]]:
    """The values each request may take for a kernel built with `grid` and `tiling`."""
    budget = max(target_simd().registers // 2, 1)
    vectors = [v for v in TILE_VECTORS
               if misfit(grid, replace(tiling, vectors=v)) is None
               and (v * tiling.block <= budget or v == 1)]
    merge = [m for m in range(1, tiling.chunks + 1)
             if misfit(grid, replace(tiling, merge=m)) is None]
    return {"vectors": vectors, "merge": merge, "order": list(range(len(ORDERS)))}


def requested(annotations: Any, built: SparseTiling) -> SparseTiling:
    """`built` with the decisions the block's annotations ask for."""
    out = built
    for field, key in REQUESTS.items():
        if key in annotations:
            value = int(annotations[key])
            out = replace(out, **{field: ORDERS[value] if field == "order" else value})
    return out


def fitting(grid: PixelGrid, built: SparseTiling, wanted: SparseTiling) -> SparseTiling:
    """`built` with each of `wanted`'s requested decisions that fits (`misfit`) taken, one
    at a time (a tile size and a channel block are checked on separate conditions: the
    laid-out grid, the stored chunks)."""
    out = built
    for field in REQUESTS:
        trial = replace(out, **{field: getattr(wanted, field)})
        if misfit(grid, trial) is None:
            out = trial
    return out


def rebuild_requested(mod: tvm.IRModule) -> tvm.IRModule:
    """`mod` with every sparse kernel block whose requested decisions differ from those
    it was built with built again (PrimFuncs without one unchanged)."""
    out = mod
    for gvar, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        body = _walk(func.body)
        if not body.same_as(func.body):
            if out is mod:
                out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
            out[gvar] = func.with_body(body)
    return out


def _walk(stmt: tirx.Stmt) -> tirx.Stmt:
    """`stmt` with the requested kernel blocks under it built again (a hand-written
    mutator over the statements a scheduled function holds: TVM 0.27 exposes none)."""
    if isinstance(stmt, s_tir.SBlockRealize):
        block = _rebuilt(stmt.block)
        if block is None:
            body = _walk(stmt.block.body)
            if body.same_as(stmt.block.body):
                return stmt
            old = stmt.block
            block = s_tir.SBlock(old.iter_vars, old.reads, old.writes, old.name_hint, body,
                                 old.init, old.alloc_buffers, old.match_buffers,
                                 old.annotations)
        return s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, block)
    if isinstance(stmt, tirx.For):
        body = _walk(stmt.body)
        if body.same_as(stmt.body):
            return stmt
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                        stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, tirx.SeqStmt):
        parts = [_walk(part) for part in stmt.seq]
        if all(a.same_as(b) for a, b in zip(parts, stmt.seq, strict=True)):
            return stmt
        return tirx.SeqStmt(parts)
    return stmt


def _rebuilt(block: s_tir.SBlock) -> s_tir.SBlock | None:
    """The kernel block built again with its requested decisions (None: `block` is no
    kernel block, or asks for what it was built with)."""
    annotations = block.annotations
    if BUILT_ATTR not in annotations or CONV_SPEC_ATTR not in annotations:
        return None
    grid, built = built_of(str(annotations[BUILT_ATTR]))
    asked = requested(annotations, built)
    # decisions drawn from another conv's choices (a transferred trace, or a record an
    # older dlas committed) may misfit this block: each request that fits is taken, the
    # block keeps its own decision for the others, so the kernel computes the conv
    wanted = fitting(grid, built, asked)
    if wanted != asked:
        log.debug("%s: requested tiling not taken whole (%s)", block.name_hint,
                  misfit(grid, asked))
    if wanted == built:
        return None
    spec = ConvSpec.from_json(str(annotations[CONV_SPEC_ATTR]))
    buffers = tuple(region.source for region in (*block.reads[:4], block.writes[0]))
    func = spmm_kernel(block.name_hint, spec, grid, wanted, buffers=buffers)
    new = _kernel_block(func)
    kept = {k: v for k, v in annotations.items() if k != BUILT_ATTR}
    kept[BUILT_ATTR] = built_json(grid, wanted)
    return s_tir.SBlock(new.iter_vars, new.reads, new.writes, new.name_hint, new.body,
                        new.init, new.alloc_buffers, new.match_buffers, kept)


def _kernel_block(func: tirx.PrimFunc) -> s_tir.SBlock:
    """The one kernel block of a function `spmm_kernel` built."""
    found: list[s_tir.SBlock] = []

    def visit(stmt: tirx.Stmt) -> None:
        if isinstance(stmt, s_tir.SBlockRealize):
            if BUILT_ATTR in stmt.block.annotations:
                found.append(stmt.block)
            else:
                visit(stmt.block.body)
        elif isinstance(stmt, tirx.For):
            visit(stmt.body)
        elif isinstance(stmt, tirx.SeqStmt):
            for part in stmt.seq:
                visit(part)

    visit(func.body)
    if len(found) != 1:
        raise ValueError(f"expected one sparse kernel block, found {len(found)}")
    return found[0]


__all__ = ["ORDERS", "REQUESTS", "choices", "rebuild_requested", "requested"]
