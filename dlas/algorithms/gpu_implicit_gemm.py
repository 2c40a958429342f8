"""A dense NCHW conv's untuned GPU schedule: the conv as an implicit GEMM, tiled by dlight.

On a GPU the paper's "minimal schedule with thread parallelism" is a thread binding (one
thread per output, the reduction serial inside it: `dlas.compiler.gpu_schedule`), which
reads every input and weight from global memory once per multiply-add. What a GPU
library does instead, and what TOPI's CUDA conv schedules did per algorithm, is tile:
output tiles over thread blocks and threads, input and weight tiles staged in shared
memory with coalesced, vectorized loads, and a register tile of outputs per thread.

TVM's default GPU rules (`dlight`) have that schedule for matmul-shaped blocks: its
`Matmul` rule normalizes a block to (batch, i, j, k) by reindexing, so a direct conv
becomes an implicit GEMM (output pixels x output channels x (input channels x taps)),
the input read through its sliding window; GEMM's im2col stage and spatial pack's
packing stages are inlined into the loads. It needs no search: the tile sizes come from
the target, and the schedule is TVM's own default for such blocks, so it is the GPU's
untuned point as the paper means it (TVM's defaults), not a tuned one.

Each dense algorithm's `gpu.py` calls this on the PrimFuncs that hold its convs; where
the rule does not apply (a depthwise conv has no reduction over channels to tile, for
one) it returns None and the thread binding stands. float32 and float16 convs build
(nvcc-checked on the CPU machines); int8 ones keep the binding until a GPU has checked
dlight's int8 path against dlas's requantizing epilogues.
"""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from .._compat.tensor_intrin import register_for
from ..tir.schedule_helpers import leaf_blocks

#: Integer types whose convs keep the thread binding: dlight's int8 path (and its tensor
#: cores) is not yet checked on a GPU with dlas's requantizing epilogues.
UNCHECKED_DTYPES = frozenset({"int8", "uint8"})


def implicit_gemm_schedule(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """dlight's Matmul schedule of `func` (its conv as an implicit GEMM), or None where
    the rule does not apply or the conv is an integer one (`UNCHECKED_DTYPES`)."""
    from tvm.s_tir import dlight as dl

    if reads_integers(func):
        return None
    # the rule tensorizes float16 onto tensor cores, importing TVM's intrinsics: register
    # only CUDA's, cheaply (all of them take 70-180 s in a process with torch loaded)
    register_for(target)

    scheduled = dl.gpu.Matmul().apply(func, target, False)
    if scheduled is None:
        return None
    # dlight returns one schedule (or a list of them for several candidate spaces)
    return scheduled[0] if isinstance(scheduled, list) else scheduled


def reads_integers(func: tirx.PrimFunc) -> bool:
    """Whether a block of `func` reads an `UNCHECKED_DTYPES` buffer (an int8 conv's data
    or weight)."""
    sch = s_tir.Schedule(func)
    return any(str(region.source.dtype) in UNCHECKED_DTYPES
               for block in leaf_blocks(sch) for region in sch.get(block).reads)
