"""How an estimate is shown: a per-stage table and totals in units a person plans with."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from dlas.estimate.estimate import Estimate

_MINUTE, _HOUR, _DAY = 60.0, 3600.0, 86400.0
_MONTH = 30.4 * _DAY


def duration(seconds: float) -> str:
    """`42 s`, `12.5 min`, `7.3 h`, `41.2 d`; beyond two months the months too, because
    that is when a sweep needs a cluster rather than patience."""
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 10 or seconds == 0 else f"{seconds:.1f} s"
    if seconds < 90 * _MINUTE:
        return f"{seconds / _MINUTE:.1f} min"
    if seconds < 48 * _HOUR:
        return f"{seconds / _HOUR:.1f} h"
    text = f"{seconds / _DAY:.1f} d"
    if seconds >= 60 * _DAY:
        text += f" (~{seconds / _MONTH:.1f} months)"
    return text


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def estimate_table(est: Estimate) -> Table:
    table = Table(title=f"estimated wall time of sweep '{est.sweep}' on this machine",
                  title_justify="left")
    for col in ("stage", "to compute", "cached", "estimated", "from measurements"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for s in est.stages:
        table.add_row(s.stage, str(s.compute), str(s.cached), duration(s.seconds),
                      _share(s.measured_s, s.seconds))
    table.add_row("total", str(sum(s.compute for s in est.stages)),
                  str(sum(s.cached for s in est.stages)), duration(est.total_s),
                  _share(est.measured_s, est.total_s), style="bold")
    return table


def summary_lines(est: Estimate) -> list[str]:
    blocked = est.points - est.runnable - est.skipped_failed
    notes = [f"{blocked} not runnable"] if blocked else []
    if est.skipped_failed:
        notes.append(f"{est.skipped_failed} failed before (skipped; --retry-failed runs them)")
    aside = f" ({'; '.join(notes)})" if notes else ""
    lines = [f"{est.points} points{aside}: {est.runnable} to run"]
    if not est.tasks:
        return [*lines, "everything is cached: a run only loads and records (seconds)"]
    par = est.parallel
    path = " -> ".join(est.tasks[i].stage for i in par.critical_path)
    lines.append(f"on this machine (1 worker, as `dlas run` runs): "
                 f"{duration(est.serial.makespan_s)}")
    if par.workers > 1:
        lines.append(f"on {par.workers} workers like it: {duration(par.makespan_s)}")
    lines += [
        f"critical path {duration(par.critical_path_s)} ({path}): no number of workers "
        "finishes sooner",
        f"sources: {_share(est.measured_s, est.total_s)} from {est.samples} stage entries "
        f"measured in this workspace (rescaled by MACs, convs, epochs, trials), "
        f"{_share(est.builtin_s, est.total_s)} from the built-in cost model"
        + (f" (training MACs x{est.mac_scale:.2f}, the rest x{est.serial_scale:.2f}"
           + (f", bfloat16 training steps /{est.bf16_speedup:.2f}"
              if est.bf16_speedup != 1.0 else "")
           + " for this machine's measured speed)" if est.builtin_s > 0 else ""),
    ]
    if any(t.stage == "compile" and "tuning" in t.basis for t in est.tasks):
        lines.append("tuning counts every budgeted trial: early stopping and schedules "
                     "reused from the target's tuning database spend fewer")
    return lines


def print_estimate(est: Estimate, console: Console) -> None:
    console.print(estimate_table(est))
    for line in summary_lines(est):
        console.print(line, markup=False)


def as_json(est: Estimate) -> dict[str, Any]:
    """The estimate as plain data (`dlas plan --estimate --json`)."""
    data = dataclasses.asdict(est)
    data.update(total_s=est.total_s, measured_s=est.measured_s, builtin_s=est.builtin_s)
    return json.loads(json.dumps(data, default=str))
