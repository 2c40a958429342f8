"""The build function MetaSchedule's builder workers run for each candidate.

MetaSchedule's `default_build` imports `tvm.s_tir.tensor_intrin` first, which registers
every tensor intrinsic TVM has (CUDA's MMA and WMMA, ROCm, Hexagon, Arm, x86) by parsing
hundreds of TVMScript functions: 45-70 s on these 2-core machines. `LocalBuilder` starts
fresh worker processes for every batch of candidates, so each batch paid that import in
each worker: measured here, one small conv kernel took 45 s to build through
`LocalBuilder`, of which the LLVM build itself was 0.1 s. That is most of the
"4-9 s per trial, 45% sending candidates to the builder" a tuned point cost.

A candidate reaching the builder is already scheduled (a tensorized block already holds
the intrinsic's body), so building it needs no intrinsic registry. This is
`default_build` without that import; it stays a module of its own so the worker's
unpickling imports nothing else of dlas (but the sparse kernel's rebuild,
`dlas.algorithms.spmm_rebuild`, for a candidate that holds one).
"""

from __future__ import annotations

from typing import Any


def build_candidate(mod: Any, target: Any, _params: Any) -> Any:
    """`LocalBuilder`'s f_build: MetaSchedule's default build minus the intrinsic import,
    in the model's CPU codegen context (`dlas.compiler.codegen_config`: no per-kernel
    argument checks), so a candidate is timed as the model will run it."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from dlas.compiler.codegen_config import cpu_codegen_context

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    if "dlas.spmm" in mod.script():  # a sparse kernel: its sampled decisions built in
        from dlas.algorithms.spmm_rebuild import rebuild_requested

        mod = rebuild_requested(mod)
    if "cpu" not in target.keys:
        return tvm_build(mod, target=target)
    with cpu_codegen_context():
        return tvm_build(mod, target=target)
