"""Compile an imported model with one convolution algorithm (layers 4 and 5 of the stack).

Pipeline (each step is there for a reason):

1. Bind parameters as constants (`BindParams`), so algorithms that transform weights at
   compile time (packing, CSR) see their values.
2. `DecomposeOpsForInference`: batch-norm becomes elementwise ops, so it fuses into the
   conv's epilogue instead of being a separate tuple-returning kernel.
2b. Constant subexpressions (the batch-norm's `sqrt(var + eps)`, transposed linear
   weights, int8 bias `dequantize`, float16 casts) are folded exactly in numpy
   (`dlas.compiler.fold`): TVM's `FoldConstant` builds and runs a kernel per constant,
   which was three quarters of a compile. Algorithms' compile-time weight arrays
   (packing, CSR) are built from these final constants in step 3.
2c. The activation layout (`dlas.compiler.layout`), and scalar quantization scales made
   1-element tensors (`dlas.compiler.qparams`): legalized as literals, every int8 layer
   would compile to its own function; as parameters, layers alike share one.
3. `LegalizeOps` with every `relax.nn.conv2d` lowered by the algorithm's TE compute (a
   conv the algorithm does not support gets TVM's default lowering, recorded in
   `CompileResult.fallbacks`), all other ops by TVM's defaults. Each algorithm-made conv
   block is tagged with its `ConvSpec` (see `dlas.algorithms.base.CONV_SPEC_ATTR`).
4. TVM's fusion (`AnnotateTIROpPattern`, `FoldConstant`, `FuseOps`, `FuseTIR`), as in
   the default CPU pipeline: conv + bias/batch-norm/ReLU/residual become one PrimFunc.
   `FoldConstant` only meets what step 2b left (ops numpy cannot evaluate exactly).
5. `schedule_hook(mod, target)` if given (tuning plugs in here). It sees the fused,
   *unscheduled* module, which is what MetaSchedule extracts tasks from and looks its
   database up by. Any PrimFunc the hook changes, or marks `tirx.is_scheduled`, is kept.
6. Minimal schedules (`dlas.compiler.minimal_schedule`) for every other PrimFunc: the
   algorithm's own for conv blocks, thread-parallel loops for the rest.
7. The rest of the default Relax CPU pipeline (no second legalization/fusion, which
   would undo step 6), `tvm.compile` without TVM's per-kernel argument checks
   (`dlas.compiler.codegen_config`: 30-45% of LLVM's work), `export_library` to `out_dir`.
   With `kernels` (a workspace's kept objects), the kernels are built only once per
   kernel key: another weight set of the same model links them (`kernel_objects`).

`CompileResult.phases` says where the time went (lower, fold, tune, schedule, codegen,
export). codegen (TIR lowering to LLVM IR) + export (LLVM's machine code, then the link)
is the floor: LLVM's own work, which no change to the Relax pipeline lowers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.target import Target
from tvm_ffi import structural_equal

from ..algorithms.base import RAW_WEIGHT, ConvAlgorithm, flatten_extern_blocks
from ..algorithms.spmm_kernel import holds_spmm_kernel
from ..algorithms.spmm_rebuild import rebuild_requested
from ..targets.arch import export_suffix, runs_here
from ..tir.conv_spec import CONV_SPEC_ATTR, ConvSpec, tag_conv_block
from ..tir.layout import DataLayout
from ..tir.schedule_helpers import target_simd, target_vector_bits
from . import fallbacks as fallback_notes
from .fold import FoldReport, fold_constants
from .gpu_schedule import build_gpu, untuned_rules
from .kernel_objects import (
    BuiltExecutable,
    DamagedKernelObject,
    KernelObjects,
    build_cpu_executable,
)
from .layout import LayoutReport, convert_layout
from .minimal_schedule import schedule_prim_func
from .pipeline import SCHEDULED_ATTR, ScheduleHook, relax_finalize_pipeline, unscheduled_prim_funcs
from .qparams import qparams_as_tensors
from .relax_import import ImportedModel
from .relax_values import constant_value, static_shape

log = logging.getLogger(__name__)

LIBRARY_FILE = "model.so"
REPORT_FILE = "compile.json"
#: The phases of `compile_model`, in order. `tune` is the schedule hook (absent without one);
#: `device_check` is a GPU build's device code compiled by nvcc (absent on CPU targets).
PHASES = ("lower", "fold", "tune", "schedule", "codegen", "device_check", "export")
#: How constants are folded: numpy first, TVM's FoldConstant for the rest (the default);
#: TVM's FoldConstant alone (the previous path, kept as the benchmarks' peer); not at all
#: (tests compare folded and unfolded modules).
FOLD_MODES = ("numpy", "tvm", "none")


@dataclass
class CompileTrace:
    """Seconds per compile phase, what constant folding did, and where the layout went."""

    phases: dict[str, float] = field(default_factory=dict)
    fold: FoldReport = field(default_factory=FoldReport)
    layout: LayoutReport = field(default_factory=lambda: LayoutReport("NCHW"))

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's wall time to `name` (a phase may be entered several times)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start


@dataclass
class CompileResult:
    """What `compile_model` produced and how."""

    executable_path: Path
    fallbacks: list[str]
    conv_count: int
    compile_seconds: float
    #: Non-conv blocks the minimal schedule could not parallelize (they run serially).
    schedule_warnings: list[str] = field(default_factory=list)
    #: PrimFuncs left to `schedule_hook` (changed or marked scheduled by it).
    hook_scheduled: list[str] = field(default_factory=list)
    #: Seconds per phase (`PHASES`); they add up to `compile_seconds` but for bookkeeping.
    phases: dict[str, float] = field(default_factory=dict)
    #: Constant folding: op -> calls folded in numpy, and calls left to TVM's FoldConstant.
    folded: dict[str, Any] = field(default_factory=dict)
    #: The activation layout: convs in it, convs kept NCHW, reorders (`LayoutReport`).
    layout: dict[str, Any] = field(default_factory=dict)
    #: What the kernels' machine code is kept under in the workspace (`kernel_objects`),
    #: None where it is not kept; `kernels_reused`: linked from an earlier compile's.
    kernel_key: str | None = None
    kernels_reused: bool = False

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["executable_path"] = str(self.executable_path)
        return out


def model_layout(algorithm: ConvAlgorithm, target: Target) -> DataLayout:
    """The activation layout a model is compiled in: the algorithm's, with NCHWc's block
    set by the algorithm or else by the target's SIMD width in float32 lanes (16 on
    AVX-512, 8 on AVX2, 4 on Neon): one block of output channels is one register."""
    if algorithm.layout != "NCHWc":
        return DataLayout(algorithm.layout)
    block = algorithm.block or max(target_simd(target).bits // 32, 1)
    return DataLayout("NCHWc", block)


def make_target(target: dict | str | Target) -> Target:
    """A TVM Target from the JSON dict form (CLI-style strings fail in TVM 0.27)."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        target = json.loads(target) if target.lstrip().startswith("{") else {"kind": target}
    return Target(dict(target))


def spec_from_call(call: relax.Call) -> tuple[ConvSpec | None, str | None]:
    """The ConvSpec of a relax conv2d call, or (None, reason) when it has none.

    Data and output may be NCHW, NHWC or NCHW<b>c (`dlas.compiler.layout` puts them so);
    the weight is OIHW.
    """
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    try:
        data_layout, out_layout = DataLayout.parse(layouts[0]), DataLayout.parse(layouts[2])
    except ValueError:
        data_layout = out_layout = None
    if data_layout is None or out_layout is None or layouts[1] != "OIHW":
        return None, f"layout {layouts} is not one of NCHW, NHWC, NCHW<b>c with OIHW weights"
    data_shape = static_shape(call.args[0].ty)
    weight_shape = static_shape(call.args[1].ty)
    if data_shape is None or weight_shape is None:
        return None, "dynamic shape"
    out_dtype = str(attrs.out_dtype) if str(attrs.out_dtype) not in ("", "void", "None") else ""
    spec = ConvSpec(
        data_shape=data_layout.logical_shape(data_shape),
        weight_shape=weight_shape,
        strides=tuple(int(v) for v in attrs.strides),
        padding=tuple(int(v) for v in attrs.padding),
        dilation=tuple(int(v) for v in attrs.dilation),
        groups=int(attrs.groups),
        data_dtype=str(call.args[0].ty.dtype),
        weight_dtype=str(call.args[1].ty.dtype),
        out_dtype=out_dtype or str(call.ty.dtype),
        data_layout=data_layout.name,
        out_layout=out_layout.name,
    )
    return spec, None


def describe(spec: ConvSpec) -> str:
    kh, kw = spec.kernel_size
    layouts = "" if spec.is_nchw else f" {spec.data_layout}->{spec.out_layout}"
    return (
        f"{spec.data_shape}->{spec.out_shape} k{kh}x{kw} s{spec.strides} p{spec.padding} "
        f"d{spec.dilation} g{spec.groups} {spec.data_dtype}{layouts}"
    )


#: The algorithm name recorded for a conv TVM's own lowering computes.
DEFAULT_LOWERING = "tvm-default"


@dataclass(frozen=True)
class ConvLowering:
    """How one conv of the model was lowered: its index in the model, its spec (None when
    it has none, e.g. a non-NCHW layout), the algorithm (`DEFAULT_LOWERING` for TVM's
    own) and its weight's non-zeros (None when the weight is not a constant)."""

    index: int
    spec: ConvSpec | None
    algorithm: str
    nnz: int | None


class ConvLegalizer:
    """`customize_legalize_map` entry for relax.nn.conv2d that uses one algorithm."""

    def __init__(self, algorithm: ConvAlgorithm) -> None:
        self.algorithm = algorithm
        self.default = tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")
        self.conv_count = 0
        self.fallbacks: list[str] = []
        #: PrimFunc name -> (algorithm name, spec) of every conv lowered by an algorithm.
        self.made: dict[str, tuple[str, ConvSpec]] = {}
        #: The algorithms that lowered convs: the chosen one and its fallback, if used.
        self.used: dict[str, ConvAlgorithm] = {}
        #: Every conv in lowering (= the model's) order: what the per-layer profile maps
        #: kernels back to (`dlas.profile.kernels`).
        self.layers: list[ConvLowering] = []

    def __call__(self, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        index = self.conv_count
        self.conv_count += 1
        spec, reason = spec_from_call(call)
        weight_value = constant_value(call.args[1])
        algorithm = self.algorithm
        if spec is not None:
            spec.validate()
            reason = self._reason(algorithm, spec, weight_value)
            fallback = algorithm.fallback() if reason is not None else None
            if fallback is not None and self._reason(fallback, spec, weight_value) is None:
                self.fallbacks.append(fallback_notes.algorithm_fallback(
                    index, describe(spec), algorithm.name, reason, fallback.name))
                algorithm, reason = fallback, None
        nnz = None if weight_value is None else int(np.count_nonzero(weight_value))
        if reason is not None:
            where = describe(spec) if spec is not None else "conv2d"
            self.fallbacks.append(fallback_notes.default_lowering(index, where, reason))
            self.layers.append(ConvLowering(index, spec, DEFAULT_LOWERING, nnz))
            return self.default(bb, call)
        self.used[algorithm.name] = algorithm
        self.layers.append(ConvLowering(index, spec, algorithm.name, nnz))
        constants = algorithm.weight_constants(spec, weight_value)
        if constants is None:
            names, weights = [RAW_WEIGHT], [call.args[1]]
        else:
            names = list(constants)
            weights = [relax.const(value) for value in constants.values()]

        def conv_te(data, *weight_tensors):
            return algorithm.compute(data, dict(zip(names, weight_tensors, strict=True)), spec)

        conv_te.__name__ = f"dlas_{algorithm.name}_conv2d"
        out = bb.call_te(conv_te, call.args[0], *weights)
        self.made[out.args[0].name_hint] = (algorithm.name, spec)
        return out

    def layout_reason(self, spec: ConvSpec, weight: np.ndarray | None = None) -> str | None:
        """Why a conv laid out as `spec` must keep NCHW: neither the algorithm nor its
        fallback computes it, or the algorithm keeps it NCHW for its weight
        (`ConvAlgorithm.keeps_nchw`); `dlas.compiler.layout` asks before it moves the
        conv."""
        reason = self.algorithm.unsupported_reason(spec)
        if reason is None:
            return self.algorithm.keeps_nchw(spec, weight)
        fallback = self.algorithm.fallback()
        if fallback is not None and fallback.unsupported_reason(spec) is None:
            return None
        return reason

    def between_nchw_reason(self, spec: ConvSpec, weight: np.ndarray | None = None
                            ) -> str | None:
        """Why a conv between convs kept in NCHW, laid out as `spec` (NCHW), is computed
        in NCHW too (`ConvAlgorithm.between_nchw`; None where the algorithm cannot)."""
        if self.algorithm.unsupported_reason(spec) is not None:
            return None
        return self.algorithm.between_nchw(spec, weight)

    @staticmethod
    def _reason(algorithm: ConvAlgorithm, spec: ConvSpec,
                weight_value: np.ndarray | None) -> str | None:
        reason = algorithm.unsupported_reason(spec)
        if reason is None and algorithm.needs_weight_value and weight_value is None:
            reason = "weight is not a compile-time constant"
        return reason


def _tag_convs(mod: tvm.IRModule, made: dict[str, tuple[str, ConvSpec]]) -> tvm.IRModule:
    for gvar, func in list(mod.functions_items()):
        if gvar.name_hint in made:
            algorithm_name, spec = made[gvar.name_hint]
            sch = tvm.s_tir.Schedule(flatten_extern_blocks(func))  # keeps the attributes
            tag_conv_block(sch, algorithm_name, spec)
            mod[gvar] = sch.mod["main"]
    return mod


#: TVM's `OpPatternKind`s (relax/tir op_pattern): an opaque function fuses with nothing;
#: a conv is "out-elementwise fusable" (its elementwise consumers fuse after it).
OPAQUE_PATTERN, OUT_EWISE_FUSABLE = 8, 4


def _fusable_convs(mod: tvm.IRModule, made: dict[str, tuple[str, ConvSpec]]) -> tvm.IRModule:
    """Convs computed by the pixel-tile sparse kernel (`dlas.algorithms.spmm_kernel`: the
    NCHW CSR algorithms) are TIR written by hand, opaque to TVM's pattern analysis, so
    `FuseOps` left their bias, ReLU and residual add as separate kernels (17 extra
    kernels, each a thread launch and a pass over the activations, in a sparse ResNet18).
    The kernel computes its whole output before anything reads it, as a TE conv does, so
    it is marked as TE convs are and its epilogue fuses; `spmm_schedule.schedule_spmm`
    then computes the epilogue per task. (The block-CSR row kernels, the vector layouts'
    and a GPU's, are left opaque: FuseTIR refuses their data-dependent block iterator
    once indices are int64.)"""
    for gvar, func in list(mod.functions_items()):
        if (gvar.name_hint not in made or not isinstance(func, tirx.PrimFunc)
                or not holds_spmm_kernel(func)):
            continue
        pattern = func.attrs.get("op_pattern") if func.attrs is not None else None
        if pattern is not None and int(pattern) == OPAQUE_PATTERN:
            mod[gvar] = func.with_attr("op_pattern", OUT_EWISE_FUSABLE)
    return mod


def lower_to_tir(
    imp_mod: tvm.IRModule,
    params: dict[str, np.ndarray],
    algorithm: ConvAlgorithm,
    target: Target,
    *,
    fold: str = "numpy",
    trace: CompileTrace | None = None,
) -> tuple[tvm.IRModule, ConvLegalizer]:
    """Steps 1-4 of the pipeline: fused, unscheduled TIR plus the legalization record.

    `fold` is one of `FOLD_MODES`; `trace`, if given, gains the lower and fold seconds,
    the fold report and the layout report.
    """
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    if fold not in FOLD_MODES:
        raise ValueError(f"fold must be one of {FOLD_MODES}, got {fold!r}")
    trace = trace if trace is not None else CompileTrace()
    legalizer = ConvLegalizer(algorithm)
    with target:
        with trace.phase("lower"):
            mod = relax.transform.BindParams("main", params)(imp_mod)
            mod = relax.transform.DecomposeOpsForInference()(mod)
            mod = tvm.transform.Sequential(cpu.library_dispatch_passes(target))(mod)
        if fold == "numpy":  # before legalization: convs see the final constants
            with trace.phase("fold"):
                mod, trace.fold = fold_constants(mod)
        with trace.phase("lower"):
            layout = model_layout(algorithm, target)
            mod, trace.layout = convert_layout(
                mod, layout, legalizer.layout_reason,
                neighbour_reason=legalizer.between_nchw_reason)
            mod = qparams_as_tensors(mod)  # layers that differ in scales share a function
            legalize = relax.transform.LegalizeOps(
                customize_legalize_map={"relax.nn.conv2d": legalizer})
            mod = _tag_convs(legalize(mod), legalizer.made)
            mod = relax.transform.AnnotateTIROpPattern()(mod)
            mod = _fusable_convs(mod, legalizer.made)
        if fold != "none":  # what numpy left (nothing, for the models seen so far)
            with trace.phase("fold"):
                mod = relax.transform.FoldConstant()(mod)
        with trace.phase("lower"):
            mod = tvm.transform.Sequential(
                [
                    relax.transform.FuseOps(),
                    relax.transform.FuseTIR(),
                    relax.transform.DeadCodeElimination(),
                ]
            )(mod)
    return mod, legalizer


def apply_minimal_schedules(
    mod: tvm.IRModule,
    algorithm: ConvAlgorithm,
    target: Target,
    skip: set[str] = frozenset(),
) -> tuple[tvm.IRModule, list[str]]:
    """Step 6: schedule every unscheduled PrimFunc not in `skip`; return warnings.

    Convs are scheduled by the algorithm that made them: `algorithm` or its fallback.
    """
    algorithms = [a for a in (algorithm, algorithm.fallback()) if a is not None]
    schedulers = {a.name: a.schedule for a in algorithms}
    warnings: list[str] = []
    with target:
        vector_bits = target_vector_bits()
        for gvar, func in unscheduled_prim_funcs(mod, skip):
            try:
                scheduled, notes = schedule_prim_func(func, schedulers, vector_bits)
            except Exception as err:
                if CONV_SPEC_ATTR in func.script():
                    raise  # a conv the algorithm claimed but cannot schedule: a bug, not a note
                # e.g. a hand-written kernel without schedulable blocks: keep it as TVM made it
                warnings.append(f"{gvar.name_hint}: not scheduled ({type(err).__name__}: {err})")
                continue
            warnings.extend(f"{gvar.name_hint}: {note}" for note in notes)
            mod[gvar] = scheduled.with_attr(SCHEDULED_ATTR, True)
    return mod, warnings


def compile_model(
    imp: ImportedModel,
    algorithm: ConvAlgorithm,
    target: dict | str | Target,
    out_dir: Path,
    schedule_hook: ScheduleHook | None = None,
    *,
    fold: str = "numpy",
    pass_config: dict | None = None,
    gpu_schedules: str = "algorithm",
    kernels: KernelObjects | None = None,
) -> CompileResult:
    """Compile `imp` with `algorithm` for `target` into `out_dir`.

    `pass_config`: the target's own PassContext options (`TargetSpec.pass_config`, e.g.
    CUDA graphs); `gpu_schedules`: a GPU's untuned schedules (`TargetSpec.gpu_schedules`).
    `fold` (one of `FOLD_MODES`) is for benchmarks and tests; everything else compiles
    with the default. `kernels`: where kernel objects are kept, so that a compile of the
    same kernels (another weight set) links them instead of building them again.
    """
    start = time.perf_counter()
    trace = CompileTrace()
    tgt = make_target(target)
    if tgt.kind.name not in ("llvm", "cuda"):
        raise NotImplementedError(
            f"targets of kind {tgt.kind.name} are not supported (llvm for CPUs, cuda for GPUs)")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mod, legalizer = lower_to_tir(imp.mod, imp.params, algorithm, tgt, fold=fold, trace=trace)
    hooked: set[str] = set()
    if schedule_hook is not None:
        before = {gv.name_hint: f for gv, f in mod.functions_items()}
        with trace.phase("tune"):
            mod = schedule_hook(mod, tgt)
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                old = before.get(gvar.name_hint)
                if old is None or not structural_equal(old, func):
                    hooked.add(gvar.name_hint)
    if tgt.kind.name == "cuda":  # thread bindings and the CUDA pipeline instead
        rules = untuned_rules(gpu_schedules, (algorithm, algorithm.fallback()))
        executable, warnings = build_gpu(mod, tgt, skip=hooked, pass_config=pass_config,
                                         rules=rules, phase=trace.phase)
        built = BuiltExecutable(executable)
    else:
        with trace.phase("schedule"):
            mod, warnings = apply_minimal_schedules(mod, algorithm, tgt, skip=hooked)
            with tgt:  # the sparse kernels' tuned decisions (`dlas.algorithms.spmm_rebuild`)
                mod = rebuild_requested(mod)
        kernels = kernels if runs_here(tgt) else None
        with trace.phase("codegen"):  # no arg checks; kernels built once per workspace
            built = build_cpu_executable(mod, tgt, relax_finalize_pipeline(tgt), kernels,
                                         pass_config)
    # a .tar of objects when the code is for another CPU (linked on the board, over RPC)
    path = (out_dir / LIBRARY_FILE).with_suffix(export_suffix(tgt))
    with trace.phase("export"):
        try:
            built.export(path)
        except DamagedKernelObject as err:  # discarded: build the kernels after all
            log.warning("kernel object not linked, building the kernels again: %s", err)
            built = build_cpu_executable(mod, tgt, relax_finalize_pipeline(tgt), kernels,
                                         pass_config)
            built.export(path)
    result = CompileResult(
        executable_path=path,
        fallbacks=legalizer.fallbacks,
        conv_count=legalizer.conv_count,
        compile_seconds=time.perf_counter() - start,
        schedule_warnings=warnings,
        hook_scheduled=sorted(hooked),
        phases={name: trace.phases[name] for name in PHASES if name in trace.phases},
        folded=trace.fold.as_dict(),
        layout={} if trace.layout.layout == "NCHW" else trace.layout.as_dict(),
        kernel_key=built.key, kernels_reused=built.reused,
    )
    report = result.to_json() | {"algorithm": algorithm.name, "target": str(tgt)}
    (out_dir / REPORT_FILE).write_text(json.dumps(report, indent=1))
    for line in result.fallbacks:
        # a documented fallback algorithm is expected; TVM's own lowering is worth a warning
        level = logging.WARNING if fallback_notes.is_default_lowering(line) else logging.INFO
        log.log(level, "fallback: %s", line)
    return result
