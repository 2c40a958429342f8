"""How a conv made by the pixel-tile sparse kernel (`spmm_kernel.spmm_stage`) runs on a
CPU's threads: its tasks in parallel, and who lays out the input each task reads."""

from __future__ import annotations

from tvm import s_tir
from tvm.s_tir.schedule import LoopRV, SBlockRV

from ..tir.schedule_helpers import is_parallelized, parallelize_block, target_vector_bits
from .base import ConvSpec
from .schedule_util import parallel_outer, parallelize_rows, vectorize_loop


def schedule_spmm(sch: s_tir.Schedule, block: SBlockRV, spec: ConvSpec) -> LoopRV:
    """Schedule a conv made by `spmm_stage`, whose kernel block is `block`; return the
    task loop the epilogue is computed at.

    The kernel's (image, task) loops run in parallel; its tiles, chunks, vectors and
    unrolling are the kernel's own. Where a task reads every input channel (`groups` 1),
    each task lays out its input (the algorithm's padding, packing or im2col) itself,
    under its task loop (`localize_layout`). A grouped conv's task reads only its own
    groups' channels, which a layout stage run in parallel over (image, channel) lays
    out on the same thread (the static split gives both the same halves); computed per
    task it would lay out every channel once per task (MobileNetV2-w0.5's depthwise
    convs: the model 0.649 -> 0.738 ms at 90%, Cascade Lake).
    """
    task = parallel_outer(sch, sch.get_loops(block))
    if spec.groups == 1:
        localize_layout(sch, block, task, spec.data_dtype)
    else:
        pending = list(sch.get_producers(block))
        while pending:
            stage = pending.pop(0)
            pending.extend(sch.get_producers(stage))
            if not is_parallelized(sch, stage):
                parallelize_rows(sch, stage, 2, spec.data_dtype)  # (n, c)
    return task


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
        vectorize_loop(sch, sch.get_loops(stage)[-1], dtype)
        pending.extend(upstream)


__all__ = ["localize_layout", "schedule_spmm"]
