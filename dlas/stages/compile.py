"""Stage `compile`: the imported model compiled for the target with one convolution
algorithm (layer 4) and one tuning option (layer 5), exported as a library."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlas.stages.base import Job, Resources, StoredStage
from dlas.stages.facts import CompileFacts
from dlas.stages.import_model import IMPORT
from dlas.stages.outputs import CompiledLibrary
from dlas.sweep.grid import Point
from dlas.targets.resolve import resolve_target


def tunes(point: Point) -> bool:
    """Whether compiling the point searches schedules (and so times candidates on this
    machine): every tuning option but `none` and the baselines (which compile nothing).
    Not read from `budgets.tuning_trials`: an option's own `trials` param, or its default
    when both are unset, gives the search its trials (`metaschedule`), so a budget of 0
    does not mean "no search"."""
    return point.tuning.name != "none" and not point.is_baseline


class CompileStage(StoredStage[CompileFacts, CompiledLibrary]):
    name = "compile"
    #: 2: constants folded in numpy (same values), the phases' seconds and the fold
    #: report in its facts.
    version = 2
    parent = "import"
    parent_field = "imported"
    reads = ("algorithms", "tuning", "targets")
    needs = ("import",)
    #: the kernels (compute and schedules), the pipeline, the search and its rules
    code = ("algorithms", "compiler", "tir", "tuning/base", "tuning/options",
            "tuning/metaschedule", "_compat", "targets")
    libraries = ("apache-tvm", "apache-tvm-ffi")
    facts_type = CompileFacts
    resources = Resources(cpus=2)

    def key_inputs(self, point: Point) -> dict[str, Any]:
        return {"algorithm": point.algorithms.identity(), "tuning": point.tuning.identity(),
                "target": point.targets.identity(),
                "tvm_target": resolve_target(point).tvm_target,
                "tuning_trials": point.budgets.tuning_trials}

    def resources_for(self, point: Point) -> Resources:
        # tuning times its candidates on this machine: nothing else may run meanwhile
        return Resources(cpus=2, exclusive=True) if tunes(point) else self.resources

    def compute(self, job: Job) -> CompileFacts:
        from dlas.compiler.build import compile_model
        from dlas.compiler.kernel_objects import KERNELS_DIR, KernelObjects
        from dlas.tuning.base import TuningContext

        point, console = job.point, job.env.console
        imported = job.inputs[IMPORT]
        target = resolve_target(point)
        algorithm = point.algorithms.option.fn(point.algorithms.params)
        tuning_ctx = TuningContext(target=target, budgets=point.budgets,
                                   work_dir=job.env.workspace_root / "tuning",
                                   progress=job.env.progress, say=console.note)
        hook = point.tuning.option.fn(point.tuning.params, tuning_ctx)
        activity = "tuning and compiling" if hook is not None else "compiling"
        with console.activity(f"{activity} with {point.algorithms.label}"):
            result = compile_model(imported.model, algorithm, target.tvm_target, job.dir,
                                   schedule_hook=hook, pass_config=target.pass_config,
                                   gpu_schedules=target.gpu_schedules,
                                   kernels=KernelObjects(job.env.workspace_root / KERNELS_DIR))
        tuning = hook.report.summary() if hasattr(hook, "report") else None
        tuning_s = tuning["seconds"] if tuning else 0.0
        return CompileFacts(
            executable=result.executable_path.name, fallbacks=result.fallbacks,
            schedule_warnings=result.schedule_warnings, conv_count=result.conv_count,
            compile_s=result.compile_seconds - tuning_s,  # tuning apart
            tuning_s=tuning_s, tuning=tuning, tvm_target=target.tvm_target,
            # where a point's compile time goes; import is its stage's (shared by the
            # point's variants: torch.export, Relax frontend, reference outputs)
            phases={"import": imported.facts.seconds, **result.phases},
            folded=result.folded, layout=result.layout,
            kernel_key=result.kernel_key, kernels_reused=result.kernels_reused)

    def load(self, path: Path, facts: CompileFacts) -> CompiledLibrary:
        return CompiledLibrary(path / facts.executable, facts)


COMPILE = CompileStage()
