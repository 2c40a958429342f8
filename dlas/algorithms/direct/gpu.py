"""The untuned GPU schedule of the dense direct conv (NCHW): the conv as an implicit GEMM,
tiled in shared memory and registers by TVM's default GPU rule (`gpu_implicit_gemm`).
CSR convs keep their row kernels (`dlas.compiler.gpu_schedule`)."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from ..gpu_implicit_gemm import implicit_gemm_schedule


def schedule_direct_gpu(func: tirx.PrimFunc, target: Target) -> s_tir.Schedule | None:
    """`func`'s GPU schedule, or None for the thread binding."""
    return implicit_gemm_schedule(func, target)
