"""Pieces of the compile pipeline that the CPU path (`build`) and the GPU path
(`gpu_schedule`) share: which PrimFuncs still need a schedule, and the Relax passes run
after scheduling.

They live apart from both so that `build` can hand CUDA targets to `gpu_schedule` and
`gpu_schedule` can use them without the two modules importing each other.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import ir, tirx
from tvm.target import Target

#: PrimFunc attribute that marks a function as scheduled: a tuning hook's result, or a
#: minimal/GPU schedule already applied. Later schedule passes leave such functions alone.
SCHEDULED_ATTR = "tirx.is_scheduled"

#: A tuning hook: gets the fused, unscheduled module, returns it with the PrimFuncs it
#: scheduled (changed, or marked with SCHEDULED_ATTR). See `dlas.tuning.base`.
ScheduleHook = Callable[[tvm.IRModule, Target], tvm.IRModule]


def unscheduled_prim_funcs(
    mod: tvm.IRModule, skip: set[str] = frozenset()
) -> list[tuple[ir.GlobalVar, tirx.PrimFunc]]:
    """The PrimFuncs a schedule pass must still handle: not in `skip` (the tuning hook's)
    and not marked scheduled."""
    return [(gvar, func) for gvar, func in mod.functions_items()
            if isinstance(func, tirx.PrimFunc) and gvar.name_hint not in skip
            and not (func.attrs is not None and func.attrs.get(SCHEDULED_ATTR, False))]


def relax_finalize_pipeline(target: Target) -> tvm.transform.Pass:
    """The target's default Relax pipeline (CPU or CUDA) minus dispatch/legalization/fusion
    (done already, before scheduling; running them again would undo the schedules)."""
    if target.kind.name == "cuda":
        from tvm.relax.backend.cuda import pipeline as backend
    else:
        from tvm.relax.backend.cpu_generic import pipeline as backend

    @tvm.transform.module_pass(opt_level=0, name="DlasRelaxFinalize")
    def _pipeline(mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        with target:
            passes = backend.dataflow_lower_passes(target) + backend.finalize_passes(target)
            return tvm.transform.Sequential(passes)(mod)

    return _pipeline
