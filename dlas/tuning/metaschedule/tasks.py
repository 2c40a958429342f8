"""Tuning tasks of a compiled model: one per distinct fused PrimFunc, with what it needs.

A task is MetaSchedule's unit of search: one PrimFunc (a conv with its fused epilogue, a
pooling, a dense layer), deduplicated by structure, so a workload appearing several
times in a model is tuned once. For each task this module also records

* which conv algorithms made its conv blocks (CSR kernels need the sparse space), and
* the real values of the constants the model passes it: a CSR kernel's candidates must
  be timed with the model's own `indices`/`indptr`, as random index arrays read out of
  bounds and random non-zero counts time a different kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax, s_tir, tirx
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import SBlockRV
from tvm_ffi import structural_equal

from dlas.algorithms.spmm_kernel import BUILT_ATTR
from dlas.compiler.pipeline import SCHEDULED_ATTR
from dlas.compiler.relax_values import constant_value
from dlas.tir.conv_spec import CONV_ALGORITHM_ATTR, CONV_SPEC_ATTR, ConvSpec
from dlas.tir.schedule_helpers import const_extent, root_block


@dataclass
class Task:
    name: str
    #: The unscheduled PrimFunc as an IRModule (its function is "main"), MetaSchedule's key.
    mod: tvm.IRModule
    #: How often the model calls it (MetaSchedule weighs tasks by this).
    weight: int
    #: Names of the conv algorithms whose blocks it contains.
    algorithms: set[str] = field(default_factory=set)
    #: PrimFunc parameter index -> the constant the model passes there.
    constants: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def has_dynamic_loops(self) -> bool:
        """True for CSR kernels (a loop whose extent is read from memory): a block loop's
        (the block-CSR rows), or one inside a pixel-tile kernel's block, which its
        `dlas.spmm` annotation says."""
        sch = s_tir.Schedule(self.mod)
        blocks = _all_blocks(sch)
        return (any(BUILT_ATTR in sch.get(block).annotations for block in blocks)
                or any(const_extent(sch, loop) is None
                       for block in blocks for loop in sch.get_loops(block)))

    @property
    def kind(self) -> str:
        """The search space it needs: "sparse" (CSR kernels), "vector" (a conv in NHWC or
        NCHWc: the micro-kernel's space), "dense" (MetaSchedule's own)."""
        if self.has_dynamic_loops:
            return "sparse"
        if any(not spec.is_nchw for spec in conv_specs(self.mod)):
            return "vector"
        return "dense"

    def index_constants(self) -> dict[int, np.ndarray]:
        """The constants a candidate must be timed with: all of them when the task reads
        integer arrays (CSR indices), none otherwise (values do not change dense timing)."""
        if any(np.issubdtype(v.dtype, np.integer) for v in self.constants.values()):
            return dict(self.constants)
        return {}


def _all_blocks(sch: s_tir.Schedule) -> list[SBlockRV]:
    """Every block of the schedule's function, nested ones (CSR updates) included."""
    blocks, frontier = [], [root_block(sch)]
    while frontier:
        children = list(sch.get_child_blocks(frontier.pop()))
        blocks += children
        frontier += children
    return blocks


def _conv_algorithms(func: tirx.PrimFunc) -> set[str]:
    sch = s_tir.Schedule(func)
    return {str(sch.get(b).annotations[CONV_ALGORITHM_ATTR]) for b in _all_blocks(sch)
            if CONV_ALGORITHM_ATTR in sch.get(b).annotations}


def conv_specs(mod: tvm.IRModule) -> list[ConvSpec]:
    """The ConvSpecs of the conv blocks in a task."""
    sch = s_tir.Schedule(mod)
    return [ConvSpec.from_json(str(sch.get(b).annotations[CONV_SPEC_ATTR]))
            for b in _all_blocks(sch) if CONV_SPEC_ATTR in sch.get(b).annotations]


def _call_constants(mod: tvm.IRModule) -> dict[str, dict[int, np.ndarray]]:
    """PrimFunc name -> {argument index: constant value} over every `call_tir` in main."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    found: dict[str, dict[int, np.ndarray]] = {}

    @relax.expr_functor.visitor
    class ConstantArguments(relax.PyExprVisitor):
        def visit_call_(self, call: relax.Call) -> None:  # noqa: N802 - TVM's visitor name
            if call.op.same_as(call_tir):
                name = call.args[0].name_hint
                args = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else []
                values = {i: v for i, v in enumerate(map(constant_value, args))
                          if v is not None}
                found.setdefault(name, values)
            super().visit_call_(call)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            ConstantArguments().visit_expr(func)
    return found


def extract(mod: tvm.IRModule, target: tvm.target.Target) -> list[Task]:
    """The tasks of a fused, unscheduled model (what `compile_model` hands its hook)."""
    constants = _call_constants(mod)
    by_name = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    tasks = []
    for extracted in ms.relax_integration.extract_tasks(mod, target):
        task_mod = extracted.dispatched[0]
        func = task_mod["main"]
        if func.attrs is not None and func.attrs.get(SCHEDULED_ATTR, False):
            continue
        name = extracted.task_name
        if name not in by_name:  # the task took another call site's name: find it by structure
            name = next((n for n, f in by_name.items()
                         if structural_equal(f.without_attr("global_symbol"),
                                                    func.without_attr("global_symbol"))), name)
        tasks.append(Task(name=extracted.task_name, mod=task_mod, weight=int(extracted.weight),
                          algorithms=_conv_algorithms(func), constants=constants.get(name, {})))
    return tasks
