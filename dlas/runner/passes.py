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

A point first timed after pass 1 (computed by a later pass: a run that resumed a sweep
with points yet to compute) would end with fewer runs than asked, so extra passes, each
of those points alone, follow until every point has them. `--retry-failed` retries the
failed points in pass 1, and its later passes time those points and nothing else: the
day profile, resumed with `--retry-failed` while 64 of its points were uncomputed, had its
pass 2 compute them all and re-time the rest of the workspace, and left the 64 with 2 runs
of 3 (tests/test_passes.py).
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
        executor.another_run_follows = False
        executor.end_runs()
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
    #: The points the run is about: under `retry_failed`, those its first pass retried
    #: (the later passes time them and nothing else); otherwise every point.
    only: frozenset[str] | None = None
    for done in range(total):
        of = f" (timing pass {done + 1} of {total})" if total > 1 else ""
        if remeasure is not None:
            dropped = forget_timings(config, executor.workspace.db_path, executor.cache,
                                     only_noisy=remeasure == NOISY, only=only)
            executor.timing_source = "remeasure"
            which = "flagged noisy " if remeasure == NOISY else ""
            executor.console.note(
                f"re-measuring {len(dropped)} point(s) {which}in fresh timing workers{of} "
                "(their cached timings were dropped; compiled modules are reused; earlier "
                "timing runs stay in the history)")
        elif done > 0:
            dropped = forget_timings(config, executor.workspace.db_path, executor.cache,
                                     only_noisy=False, fewer_runs_than=done + 1, only=only)
            if not dropped:
                continue  # every point has this pass's run already (a resumed run)
            executor.console.note(f"timing {len(dropped)} point(s) again{of}, so each "
                                  "row's figures pool runs spread over time (docs/timing.md)")
        # a spare timing worker imports beside this pass's last group, for the next pass
        executor.another_run_follows = done + 1 < total
        report = executor.run(config, fail_fast=fail_fast,
                              retry_failed=retry_failed and done == 0, only=only)
        if retry_failed and done == 0:
            only = frozenset(row.point_key for row in report.rows)
        wall += report.wall_seconds
        if _stopped(report, fail_fast):
            break
    else:
        if remeasure is None:
            report, wall = _owed(executor, config, total, fail_fast, only, report, wall)
    assert report is not None
    report.wall_seconds = wall
    return report


def _stopped(report: RunReport, fail_fast: bool) -> bool:
    return report.interrupted or (fail_fast and bool(report.failed
                                                      or report.verification_failed))


def _owed(executor: SweepExecutor, config: SweepConfig, total: int, fail_fast: bool,
          only: frozenset[str] | None, report: RunReport | None, wall: float
          ) -> tuple[RunReport | None, float]:
    """Extra passes for the points first timed after pass 1 (a point computed by a later
    pass, as when a run resumed a sweep that had points yet to compute), until every point
    has its `total` runs: at most `total - 1` of them, each timing only those points."""
    for _ in range(total - 1):
        owing = forget_timings(config, executor.workspace.db_path, executor.cache,
                               only_noisy=False, fewer_runs_than=total, only=only)
        if not owing:
            break
        executor.console.note(
            f"timing {len(owing)} point(s) again (an extra pass): they were first timed "
            f"after pass 1 and owe runs of the {total} passes")
        report = executor.run(config, fail_fast=fail_fast,
                              only=frozenset(p.key for p in owing))
        wall += report.wall_seconds
        if _stopped(report, fail_fast):
            break
    return report, wall
