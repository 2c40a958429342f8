"""A sweep run in timing passes: every measured point timed `budgets.timing_passes` times,
each pass after the last one finished every model.

Why (docs/timing.md, "Runs minutes apart"): on the shared VMs dlas runs on, the machine's
state moves over minutes in ways no probe inside a timing run predicts, so two runs of the
same artifact a few minutes apart differed by up to 10% (TVM) and 18% (PyTorch eager) on
Zen 5, while the figure pooled over three runs agreed with another such figure within
6.4% (TVM) and 6.7% (PyTorch). Repeating at the level that varies (Kalibera & Jones) is
the cure the evidence supports; spreading the runs is what makes them independent.

The passes share a point's budgets (`dlas.runner.timing_groups.rounds_policy`): with the
default 10 rounds and 3 passes, each run takes 4 rounds and a third of the samples, so the
three cost about 1.5x one long run (the workers' start is paid per pass).

Pass 1 is the sweep itself. Each later pass drops the cached timing of every ok point
whose history has fewer runs than the passes so far (`dlas.runner.remeasure`) and runs
the sweep again: everything else is cached, so only timing workers run, and each row is
rewritten with figures pooled over all its runs. An interrupted run resumes where it
stopped: points that already have their runs are not timed again. `--remeasure` makes
every pass time every point again, whatever its history.
"""

from __future__ import annotations

from dlas.runner.remeasure import forget_timings
from dlas.runner.sweep_executor import SweepExecutor
from dlas.runner.workspace import RunReport
from dlas.sweep.config import SweepConfig

#: `remeasure` values: time again every ok point, or only those flagged noisy.
ALL, NOISY = "all", "noisy"


def run_in_passes(executor: SweepExecutor, config: SweepConfig, *, fail_fast: bool = False,
                  retry_failed: bool = False, remeasure: str | None = None,
                  passes: int | None = None) -> RunReport:
    """Run `config` in `passes` timing passes (default `budgets.timing_passes`); the last
    pass's report, with the wall time of all of them."""
    total = passes if passes is not None else config.budgets.timing_passes
    if total < 1:
        raise ValueError(f"timing passes must be at least 1, got {total}")
    if remeasure not in (None, ALL, NOISY):
        raise ValueError(f"remeasure must be {ALL!r}, {NOISY!r} or None, not {remeasure!r}")
    if total != config.budgets.timing_passes:  # `--passes`: each run takes its share
        config = config.model_copy(update={"budgets": config.budgets.model_copy(
            update={"timing_passes": total})})
    table = executor.console.table_in_summary
    executor.console.table_in_summary = table and total == 1  # once, after the last pass
    try:
        report = _passes(executor, config, total, fail_fast=fail_fast,
                         retry_failed=retry_failed, remeasure=remeasure)
    finally:
        executor.console.table_in_summary = table
    if table and total > 1 and report.rows:
        executor.console.results(report)  # the rows as the last pass left them
        executor.console.out.print(f"{total} timing passes; wall time "
                                   f"{report.wall_seconds:.1f}s in all")
    return report


def _passes(executor: SweepExecutor, config: SweepConfig, total: int, *, fail_fast: bool,
            retry_failed: bool, remeasure: str | None) -> RunReport:
    """The passes themselves (see the module doc)."""
    wall = 0.0
    report: RunReport | None = None
    for done in range(total):
        of = f" (timing pass {done + 1} of {total})" if total > 1 else ""
        if remeasure is not None:
            dropped = forget_timings(config, executor.workspace.db_path, executor.cache,
                                     only_noisy=remeasure == NOISY)
            executor.timing_source = "remeasure"
            which = "flagged noisy " if remeasure == NOISY else ""
            executor.console.note(
                f"re-measuring {len(dropped)} point(s) {which}in fresh timing workers{of} "
                "(their cached timings were dropped; compiled modules are reused; earlier "
                "timing runs stay in the history)")
        elif done > 0:
            dropped = forget_timings(config, executor.workspace.db_path, executor.cache,
                                     only_noisy=False, fewer_runs_than=done + 1)
            if not dropped:
                continue  # every point has this pass's run already (a resumed run)
            executor.console.note(f"timing {len(dropped)} point(s) again{of}, so each "
                                  "row's figures pool runs spread over time (docs/timing.md)")
        report = executor.run(config, fail_fast=fail_fast,
                              retry_failed=retry_failed and done == 0)
        wall += report.wall_seconds
        if report.interrupted or (fail_fast and (report.failed or
                                                 report.verification_failed)):
            break
    assert report is not None
    report.wall_seconds = wall
    return report

