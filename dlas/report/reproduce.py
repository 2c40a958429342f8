"""`dlas reproduce`: run an experiment's profile (cached, resumable) and write its report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlas.report.build import ReportFiles, build_report
from dlas.report.experiments import load_experiment, resolve_sweep

if TYPE_CHECKING:
    from dlas.runner.sweep_executor import SweepExecutor
    from dlas.runner.workspace import RunReport, Workspace


@dataclass
class Reproduction:
    sweep_file: Path
    run: RunReport
    report: ReportFiles
    skipped: dict[str, list[str]]


def reproduce(name: str, profile: str, workspace: Workspace, *, out: Path | None = None,
              skip_unregistered: bool = False, progress: bool = True,
              retry_failed: bool = False, executor: SweepExecutor | None = None,
              profile_layers: Callable[[Any, Workspace], None] | None = None
              ) -> Reproduction:
    """Resolve the profile's sweep, write it under WORKSPACE/experiments, run it with the
    workspace's cache (a second call recomputes nothing) and build its report (default
    WORKSPACE/reports/<experiment>-<profile>). `executor` runs the sweep (default: the
    local one on `workspace`; `dlas.runner.executor_choice` makes a Ray one);
    `profile_layers(config, workspace)`, when given, profiles the measured points per
    layer before the report, so it shows where the time goes and the layers behind each
    observation. Profiling times on this machine, whichever executor ran the sweep."""
    from dlas.runner.executor_choice import make_executor
    from dlas.sweep.grid import expand

    experiment = load_experiment(name)
    sweep_name = experiment.profile(profile).sweep_name
    sweep_file = workspace.root / "experiments" / f"{sweep_name}.yaml"
    config, skipped = resolve_sweep(experiment, profile, skip_unregistered=skip_unregistered,
                                    write_to=sweep_file)
    if executor is None:
        executor = make_executor("local", workspace, progress=progress)
    elif executor.workspace.root != workspace.root:
        raise ValueError(f"the executor runs on workspace {executor.workspace.root}, the "
                         f"reproduction on {workspace.root}: give one workspace")
    from dlas.runner.passes import run_in_passes

    run = run_in_passes(executor, config, retry_failed=retry_failed)
    notes = []
    if skipped:
        left_out = "; ".join(f"{layer}: {', '.join(n)}" for layer, n in skipped.items())
        notes.append(f"LEFT OUT (not registered when this ran, --skip-unregistered): "
                     f"{left_out}. Tables and observations that need them are incomplete.")
    if run.interrupted:
        notes.append("The sweep was interrupted; the report shows what had finished.")
    elif profile_layers is not None:
        profile_layers(config, workspace)
    report = build_report(workspace.db_path, out or workspace.root / "reports" / sweep_name,
                          sweeps=[sweep_name], experiment=experiment, profile=profile,
                          notes=notes, point_keys={p.key for p in expand(config)})
    return Reproduction(sweep_file, run, report, skipped)
