"""How a conv made by the pixel-tile sparse kernel (`spmm_kernel.spmm_stage`) runs on a
CPU's threads: its tasks in parallel, and who lays out the input each task reads."""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..tir.schedule_helpers import (
    is_parallelized,
    parallelize_block,
    target_vector_bits,
    transitive_blocks,
)
from .base import ConvSpec
from .schedule_util import parallel_outer, parallelize_rows, vectorize_copy
from .spmm_kernel import BUILT_ATTR, task_channels
from .spmm_tiling import built_of


def schedule_spmm(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule a conv made by `spmm_stage`, whose kernel block is `block`; return the
    task loop the epilogue is computed at.

    The kernel's (image, task) loops run in parallel; its tiles, chunks, vectors and
    unrolling are the kernel's own. Each task lays out the input it reads (the
    algorithm's padding, packing or im2col) itself, under its task loop
    (`localize_layout`): every channel where a task reads every one (`groups` 1), its
    own groups' channels where its rows are whole groups (`spmm_kernel.task_channels`;
    the layout stages split by task and merged into the kernel's loop, `merge_layout`). A
    grouped conv whose tasks split a group keeps layout stages run in parallel over
    (image, channel).

    Laid out per task, a depthwise conv runs as one parallel loop instead of three (pad,
    pack, kernel), and no thread waits for another's layout: MobileNetV2-w0.5 at 90%,
    its stride-2 depthwise conv at 32x32 40.3 -> 26.7 us in the model, its 17 depthwise
    convs 273 -> 219 us (dense NCHWc: 203; Cascade Lake, 2 threads, with the unrolled
    strided packing of `schedule_util.vectorize_copy`).
    """
    _, tiling = built_of(str(sch.get(block).annotations[BUILT_ATTR]))
    read = task_channels(spec, tiling.rows)
    if spec.groups > 1 and read is not None:
        return merge_layout(sch, block, read, spec.data_dtype)
    task = parallel_outer(sch, sch.get_loops(block))
    if spec.groups == 1:
        localize_layout(sch, block, task, spec.data_dtype)
    else:
        for stage in transitive_blocks(sch, block, sch.get_producers):
            if not is_parallelized(sch, stage):
                parallelize_rows(sch, stage, 2, spec.data_dtype)  # (n, c)
    return task


def merge_layout(sch: s_tir.Schedule, block: SBlockRV, read: int, dtype: str) -> LoopRV:
    """Run each layout stage of a grouped conv whose tasks read `read` channels each
    (`spmm_kernel.task_channels`) in the kernel's task loop, over the task's channels
    only: each stage's (image, channel) loops split by tasks and merged with the
    kernel's (image, task) loop, which then runs in parallel; return it.

    Not `compute_at`: that would lay out the region the kernel declares it reads, which
    is every channel (see `task_channels`)."""
    # upstream first, as the merged loop runs them (the layout stages form a chain)
    stages = transitive_blocks(sch, block, sch.get_producers)[::-1]
    outers = []
    for stage in stages:
        loops = sch.get_loops(stage)
        sch.split(loops[1], factors=[None, read])  # (tasks, a task's channels)
        vectorize_copy(sch, stage, dtype)
        outers.append(sch.fuse(loops[0], sch.get_loops(stage)[1]))
    kernel = sch.get_loops(block)
    task = sch.fuse(*kernel) if len(kernel) > 1 else kernel[0]
    merged = sch.merge(*outers, task) if outers else task
    sch.parallel(merged)
    return merged


def localize_layout(sch: s_tir.Schedule, block: SBlockRV, task: LoopRV, dtype: str) -> None:
    """Compute the stages that lay out `block`'s input (transitively) at loop `task`,
    innermost loop vectorized; a stage that cannot move there runs in parallel alone.

    Why: a task reads every input channel of its image. Laid out by a parallel stage of
    its own, half of that layout was written by the other thread, and every task read it
    from the other core's cache: on a 2-vCPU VM whose vCPUs are far apart (223 ns a
    round trip) a 3x3 sparse conv then ran no faster on two threads than on one
    (ResNet18-w0.5's 128-channel 8x8 conv at 90%: 45 us on one, 43 on two). Laid out
    by each task (the same image, once per thread), it took 28 us on two; a layout
    stage is a copy, cheap beside reading it across cores (Xeon Cascade Lake).
    """
    pending = list(sch.get_producers(block))
    while pending:
        stage = pending.pop(0)
        upstream = list(sch.get_producers(stage))
        try:
            sch.compute_at(stage, task, preserve_unit_loops=True)
        except Exception:  # noqa: BLE001 - a stage that cannot move stays a parallel one
            if not is_parallelized(sch, stage):
                parallelize_block(sch, stage, target_vector_bits())
            continue
        vectorize_copy(sch, stage, dtype)
        pending.extend(upstream)


__all__ = ["localize_layout", "merge_layout", "schedule_spmm"]
