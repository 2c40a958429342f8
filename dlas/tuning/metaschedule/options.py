"""Registers `metaschedule`, TVM's auto-scheduler, on the tuning layer (layer 5)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlas.registry import register

if TYPE_CHECKING:
    from dlas.sweep.grid import Point
    from dlas.tuning.base import ScheduleHook, TuningContext

#: The DLAS paper's budget: 20,000 trials, stopping after 1,000 without improvement.
PAPER_TRIALS = 20_000
PAPER_PATIENCE = 1_000


class MetaScheduleParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trials: int | None = Field(
        None, ge=1, description="total trials per point (default: the sweep's "
        f"budgets.tuning_trials, else the paper's {PAPER_TRIALS})")
    trials_per_task: int = Field(1000, ge=1, description="trials per task (fused PrimFunc)")
    early_stopping: int | None = Field(
        PAPER_PATIENCE, ge=1, description="end a task after this many trials without a "
        "better candidate (paper: 1000); null disables")
    trials_per_iter: int = Field(64, ge=1, description="candidates measured per search round")
    builder_timeout_s: float = Field(300.0, gt=0, description="one candidate's build "
                                     "(LLVM builds take tens of seconds on small machines)")
    runner_timeout_s: float = Field(60.0, gt=0, description="one candidate's measurement")
    cost_model: Literal["xgb", "mlp", "random"] = Field(
        "xgb", description="how candidates are ranked before measuring")
    population: int = Field(512, ge=8, description="evolutionary search population")
    seed: int = Field(0, description="search seed")
    transfer: bool | Literal["only"] = Field(
        True, description="transfer-tuning: before searching a task, replay the best "
        "schedules of structurally matching tasks already tuned for this target (same "
        "algorithm and blocks, other shapes), measured as candidates that seed the search; "
        "'only' spends no search trials (cheap sweeps); false disables")
    transfer_sources: int = Field(4, ge=1, description="tuned workloads replayed per task")
    allocation: Literal["time", "flops"] = Field(
        "time", description="share the point's trials among its tasks in proportion to "
        "each task's measured share of the model's time (after transfer-tuning, so a task a "
        "transferred schedule made fast gets few), or by MACs, largest first, as many tasks "
        "as one batch each reaches (MetaSchedule's gradient scheduler's first round)")
    tasks: Literal["all", "convs"] = Field(
        "all", description="tune every fused function, or only those holding a conv (the "
        "rest keep their minimal schedule; much cheaper on small machines)")


def tuning_possible(point: Point) -> str | None:
    """Where MetaSchedule cannot tune a point, why (the point is recorded, not run)."""
    from dlas.targets.resolve import resolve_target

    target = resolve_target(point)
    # sparse (CSR) code is tuned on GPUs too, in its own space (`sparse_space.gpu_csr_space`;
    # MetaSchedule's GPU rules cannot split a loop whose extent is read from memory, and
    # the DLAS paper could not tune sparse GPU code)
    if target.unmeasurable and target.rpc is None:
        return ("unsupported here: tuning measures candidates on the target, and "
                f"{target.unmeasurable}")
    return None


@register("tuning", "metaschedule", params=MetaScheduleParams, constraints=[tuning_possible],
          description="TVM MetaSchedule auto-scheduling (Ansor's successor) of every task, "
                      "dense and CSR (sparse sketch rules), with early stopping and a tuning "
                      "database per target shared by all sweeps")
def metaschedule(params: MetaScheduleParams, ctx: TuningContext) -> ScheduleHook:
    import os

    from dlas.tuning.metaschedule.database import database_dir
    from dlas.tuning.metaschedule.measure import Timeouts
    from dlas.tuning.metaschedule.tune import MetaScheduleHook, TuningSettings

    total = params.trials or ctx.budgets.tuning_trials or PAPER_TRIALS
    settings = TuningSettings(
        trials=total,
        trials_per_task=min(params.trials_per_task, total),
        early_stopping=params.early_stopping,
        trials_per_iter=params.trials_per_iter,
        timeouts=Timeouts(builder_s=params.builder_timeout_s, runner_s=params.runner_timeout_s),
        cost_model=params.cost_model,
        population=params.population,
        seed=params.seed,
        builder_workers=max(1, len(os.sched_getaffinity(0))),
        only_convs=params.tasks == "convs",
        transfer={True: "on", False: "off"}.get(params.transfer, "only"),  # type: ignore[arg-type]
        transfer_sources=params.transfer_sources,
        allocation=params.allocation,
    )
    return MetaScheduleHook(settings, ctx.target, database_dir(ctx.work_dir, ctx.target),
                            say=ctx.say)
