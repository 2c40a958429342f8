"""The untuned GPU schedules: each algorithm's own where it has one, else every PrimFunc's
loops bound to CUDA blocks and threads.

The paper's untuned point is "a minimal schedule that uses thread parallelism". On a CPU
that is `dlas.compiler.minimal_schedule` (parallel + vectorize). On a GPU:

* a PrimFunc holding a conv whose algorithm has a GPU schedule
  (`ConvAlgorithm.gpu_schedule`, in the algorithm's folder: the dense NCHW algorithms tile
  the conv as an implicit GEMM in shared memory and registers,
  `dlas.algorithms.gpu_implicit_gemm`) gets that schedule. A `cuda` target with
  `schedules: bindings` skips it, so what the tiling buys shows beside the binding;
* dense PrimFuncs otherwise (depthwise convs, TVM's own ops): the binding, TVM's dlight
  `Fallback` rule. It inlines what it can (padding, im2col, packing stages become part of
  their consumer), fuses a block's spatial loops and splits them over `blockIdx.x` x
  `threadIdx.x`; reductions run serially inside a thread.
* CSR kernels (a row block per output channel holding an update block whose reduction
  extent is read from `indptr`): `Fallback` either gives up on them or binds only the
  inner loops, leaving one kernel launch per row on the host. `_bind_blocks` binds the
  rows to `blockIdx.x` and the row's output pixels to `threadIdx.x`; each thread walks its
  row's non-zeros serially. Every other block of such a function gets its own kernel.

The CUDA Relax pipeline differs from the CPU one only in `RewriteCUDAGraph`; its pieces
are used by `pipeline.relax_finalize_pipeline`.

CUDA code is compiled by TVM's `tvm_callback_cuda_compile`: NVRTC (needs the
`cuda-bindings` package) or, with `TVM_CUDA_COMPILE_MODE=nvcc`, the `nvcc` on PATH.
`cuda_compiler` picks nvcc when NVRTC is not importable, so a CUDA target compiles on a
machine with no GPU as long as nvcc is there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import tvm
from tvm import s_tir, tirx
from tvm.target import Target

from ..tir.conv_spec import CONV_ALGORITHM_ATTR
from ..tir.schedule_helpers import root_block
from .pipeline import SCHEDULED_ATTR, relax_finalize_pipeline, unscheduled_prim_funcs

log = logging.getLogger(__name__)

_COMPILE_MODE = "TVM_CUDA_COMPILE_MODE"


def max_threads(target: Target) -> int:
    for name in ("max_threads_per_block", "max_num_threads"):
        value = target.attrs.get(name)
        if value is not None:
            return int(value)
    return 1024


def _has_nested_blocks(sch: s_tir.Schedule) -> bool:
    return any(sch.get_child_blocks(b) for b in sch.get_child_blocks(root_block(sch)))


def _loop_kinds(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV,
                loops: list[s_tir.schedule.LoopRV]) -> list[str]:
    """'S' (spatial), 'R' (reduction) or 'O' (other) for each loop, from the block iter
    var it binds. A loop that binds an iter var through an expression, or several iter
    vars, is 'O'; one no iter var uses is spatial (a unit loop)."""
    realize = tvm.get_global_func("s_tir.schedule.GetSBlockRealize")(sch, block)
    kind_of: dict[tirx.Var, str] = {}
    for iter_var, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):
        kind = "O"
        if isinstance(value, tirx.Var):
            kind = {tirx.IterVar.DataPar: "S", tirx.IterVar.CommReduce: "R"}.get(
                int(iter_var.iter_type), "O")
        for var in tirx.analysis.undefined_vars(value, []):
            kind_of[var] = "O" if var in kind_of else kind
    return [kind_of.get(sch.get(loop).loop_var, "S") for loop in loops]


def _extent(sch: s_tir.Schedule, loops: list[s_tir.schedule.LoopRV]) -> int | None:
    total = 1
    for loop in loops:
        extent = sch.get(loop).extent
        if not isinstance(extent, tirx.IntImm):
            return None
        total *= int(extent.value)
    return total


#: How many threads a bound loop nest gets: `(extent of its fused spatial loops or None,
#: whether they also span blocks) -> a count` (an int, or a sampled one in a search space).
ThreadCount = Callable[[int | None, bool], "int | s_tir.schedule.ExprRV"]


def fixed_threads(threads: int) -> ThreadCount:
    """`threads` per block; a row's pixels (not spanning blocks) get no more than it has."""

    def count(extent: int | None, with_blocks: bool) -> int:
        if not with_blocks and extent is not None:
            return max(1, min(threads, extent))  # a small row wastes no threads
        return threads

    return count


def _bind_threads(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV,
                  loops: list[s_tir.schedule.LoopRV], threads: ThreadCount,
                  with_blocks: bool) -> None:
    """Spatial loops of `loops` first, fused and split over (blockIdx.x,) threadIdx.x."""
    kinds = _loop_kinds(sch, block, loops)
    spatial = [loop for loop, k in zip(loops, kinds, strict=True) if k == "S"]
    rest = [loop for loop, k in zip(loops, kinds, strict=True) if k != "S"]
    if not spatial:
        if not with_blocks:
            return  # one thread per GPU block does the whole (reduction) nest
        spatial = [sch.add_unit_loop(block)]
    if rest:
        sch.reorder(*spatial, *rest)
    count = threads(_extent(sch, spatial), with_blocks)
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    outer, inner = sch.split(fused, factors=[None, count])
    if with_blocks:
        sch.bind(outer, "blockIdx.x")
    sch.bind(inner, "threadIdx.x")


def bind_blocks(sch: s_tir.Schedule, threads: ThreadCount) -> None:
    """One kernel per child block of the root: CSR row blocks over blockIdx.x with their
    pixels over threadIdx.x, every other block like dlight's Fallback (no inlining)."""
    for block in sch.get_child_blocks(root_block(sch)):
        children = sch.get_child_blocks(block)
        loops = sch.get_loops(block)
        if not children:
            _bind_threads(sch, block, loops, threads, with_blocks=True)
            continue
        # a row block: its own loops are the rows (spatial), one GPU block per row
        rows = loops if loops else [sch.add_unit_loop(block)]
        fused = sch.fuse(*rows) if len(rows) > 1 else rows[0]
        sch.bind(fused, "blockIdx.x")
        for child in children:
            inner = sch.get_loops(child)[1:]  # below the fused row loop
            _bind_threads(sch, child, inner, threads, with_blocks=False)


def _bind_blocks(func: tirx.PrimFunc, threads: int) -> s_tir.Schedule:
    sch = s_tir.Schedule(func)
    bind_blocks(sch, fixed_threads(threads))
    return sch


#: An algorithm's GPU schedule of a PrimFunc holding its conv (`ConvAlgorithm.gpu_schedule`),
#: or None where it has none for that PrimFunc.
GpuScheduler = Callable[[tirx.PrimFunc, Target], "s_tir.Schedule | None"]


def conv_algorithm_of(func: tirx.PrimFunc) -> str | None:
    """The algorithm that made the conv in `func` (its blocks' annotation), if any."""
    sch = s_tir.Schedule(func)
    for block in sch.get_child_blocks(root_block(sch)):
        for inner in [block, *sch.get_child_blocks(block)]:
            name = sch.get(inner).annotations.get(CONV_ALGORITHM_ATTR)
            if name is not None:
                return str(name)
    return None


#: A CUDA target's families of untuned schedules (`cuda(schedules=...)`): each dense
#: algorithm's own (tiled implicit GEMMs, `dlas.algorithms.gpu_implicit_gemm`), thread
#: bindings only, or each output's reduction split over a warp's lanes
#: (`dlas.algorithms.gpu_split_reduction`). CSR convs keep their row kernels in all three.
GPU_SCHEDULE_FAMILIES = ("algorithm", "bindings", "reduction")


def untuned_rules(family: str, algorithms: Iterable[Any]) -> dict[str, GpuScheduler] | None:
    """The GPU schedule of each of `algorithms`' convs in `family` (by algorithm name,
    for `apply_gpu_schedules`), or None for thread bindings throughout."""
    from ..algorithms.csr import CSRFormat
    from ..algorithms.gpu_split_reduction import split_reduction_schedule

    if family not in GPU_SCHEDULE_FAMILIES:
        raise ValueError(f"unknown GPU schedule family {family!r}: "
                         f"one of {', '.join(GPU_SCHEDULE_FAMILIES)}")
    if family == "bindings":
        return None
    chosen = [a for a in algorithms if a is not None]
    if family == "reduction":
        return {a.name: split_reduction_schedule for a in chosen
                if not isinstance(a, CSRFormat)}
    return {a.name: a.gpu_schedule for a in chosen}


def schedule_gpu_func(func: tirx.PrimFunc, target: Target,
                      rules: Mapping[str, GpuScheduler] | None = None) -> s_tir.Schedule:
    """The untuned GPU schedule of one PrimFunc: the GPU schedule of the algorithm that
    made its conv (`rules`, by algorithm name) where it has one, else the thread binding
    (see the module docstring)."""
    from tvm.s_tir import dlight as dl

    rule = rules.get(conv_algorithm_of(func) or "") if rules else None
    scheduled = rule(func, target) if rule is not None else None
    if scheduled is not None:
        return scheduled
    sch = s_tir.Schedule(func)
    if not _has_nested_blocks(sch):
        scheduled = dl.gpu.Fallback().apply(func, target, False)
        if scheduled is not None:
            return scheduled
    return _bind_blocks(func, max_threads(target))


def apply_gpu_schedules(
    mod: tvm.IRModule, target: Target, skip: set[str] = frozenset(),
    rules: Mapping[str, GpuScheduler] | None = None,
) -> tuple[tvm.IRModule, list[str]]:
    """Bind every unscheduled PrimFunc not in `skip` to GPU threads; return notes.

    A PrimFunc that cannot be bound is an error: unlike on a CPU, an unbound loop nest
    does not compile for a GPU, so there is nothing to fall back to.
    """
    notes: list[str] = []
    with target:
        for gvar, func in unscheduled_prim_funcs(mod, skip):
            try:
                sch = schedule_gpu_func(func, target, rules)
            except Exception as err:
                raise RuntimeError(
                    f"{gvar.name_hint}: no GPU thread binding ({type(err).__name__}: {err})"
                ) from err
            mod[gvar] = sch.mod["main"].with_attr(SCHEDULED_ATTR, True)
    return mod, notes


def nvrtc_available() -> bool:
    return importlib.util.find_spec("cuda") is not None and (
        importlib.util.find_spec("cuda.bindings") is not None)


@contextlib.contextmanager
def cuda_compiler() -> Iterator[str]:
    """Select the CUDA compiler TVM calls back into when a CUDA module is loaded: the one
    TVM_CUDA_COMPILE_MODE names, else NVRTC if importable, else nvcc; raise if none."""
    import tvm.support.nvcc  # noqa: F401 - registers tvm_callback_cuda_compile

    chosen = os.environ.get(_COMPILE_MODE)
    if chosen is None:
        chosen = "nvrtc" if nvrtc_available() else "nvcc"
    if chosen == "nvcc" and shutil.which("nvcc") is None:
        raise RuntimeError(
            "no CUDA compiler to load the model with: nvcc is not on PATH and NVRTC "
            "(pip install cuda-bindings) is not installed"
        )
    previous = os.environ.get(_COMPILE_MODE)
    os.environ[_COMPILE_MODE] = chosen
    try:
        yield chosen
    finally:
        if previous is None:
            os.environ.pop(_COMPILE_MODE, None)
        else:
            os.environ[_COMPILE_MODE] = previous


def cuda_sources(executable: tvm.runtime.Executable) -> list[str]:
    """The CUDA C source of every device module the executable carries."""
    sources: list[str] = []

    def walk(module: tvm.runtime.Module) -> None:
        if module.kind == "cuda":
            sources.append(module.inspect_source(""))
        for imported in module.imports:
            walk(imported)

    walk(executable.mod)
    return sources


def check_device_code(executable: tvm.runtime.Executable, target: Target) -> str:
    """Compile the device code to PTX with nvcc, if there is one; return what was done.

    TVM 0.27 stores CUDA *source* in the library and compiles it when the library is
    loaded on a GPU, so without this check a codegen error would only show on the GPU
    machine. With no nvcc here the check is skipped (and said so in the compile notes).
    """
    if shutil.which("nvcc") is None:
        return "CUDA source not compiled here (no nvcc on PATH); it is compiled on load"
    from tvm.support import nvcc

    arch = str(target.attrs.get("arch", ""))
    with target:
        for source in cuda_sources(executable):
            nvcc.compile_cuda(source, target_format="ptx", arch=arch or None, compiler="nvcc")
    return f"CUDA source compiled to PTX by nvcc for {arch or 'the default arch'}"


def build_gpu(mod: tvm.IRModule, target: Target, skip: set[str] = frozenset(),
              pass_config: dict[str, Any] | None = None,
              rules: Mapping[str, GpuScheduler] | None = None,
              phase: Callable[[str], contextlib.AbstractContextManager[None]] | None = None,
              ) -> tuple[tvm.runtime.Executable, list[str]]:
    """Schedule (the algorithms' GPU `rules`, else thread bindings), compile with the
    CUDA Relax pipeline and check the device code with nvcc.

    `pass_config`: the target's PassContext options (its CUDA-graph rewrite, for one).
    `phase(name)` times each part (`schedule`, `codegen`, `device_check`): the tiled
    schedules' device code takes ~6x the binding's to compile (ResNet18-w0.5, nvcc to PTX:
    4.5 s against 0.75 s on a Zen 4), which the phases show apart.
    Needs no GPU: the library holds CUDA source that TVM compiles when it is loaded.
    """
    timed = phase if phase is not None else (lambda _name: contextlib.nullcontext())
    with timed("schedule"):
        mod, notes = apply_gpu_schedules(mod, target, skip=skip, rules=rules)
    with timed("codegen"), tvm.transform.PassContext(config=dict(pass_config or {})):
        executable = tvm.compile(mod, target=target,
                                 relax_pipeline=relax_finalize_pipeline(target))
    with timed("device_check"):
        checked = check_device_code(executable, target)
    if shutil.which("nvcc") is None:
        notes.append(checked)  # worth seeing beside the point: nothing checked the kernels
    else:
        log.info("%s", checked)
    return executable, notes
