"""What a sweep prints: per-point stage lines, progress for long work, the closing tables."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dlas.compiler.fallbacks import summary as fallback_summary

if TYPE_CHECKING:
    from dlas.runner.cache import EntryCheck
    from dlas.runner.runner import RunReport, Workspace
    from dlas.sweep.config import SweepConfig
    from dlas.sweep.grid import Point

_STATUS_STYLE = {"ok": "green", "failed": "red", "verification_failed": "red bold",
                 "not_runnable": "yellow"}


def make_console() -> Console:
    """Rich console; when output is not a terminal (logs, CI), wide enough not to fold."""
    width = None if sys.stdout.isatty() else 240
    # no `file`: rich then writes to whatever sys.stdout is at print time
    return Console(highlight=False, soft_wrap=True, width=width)


#: Accuracy columns: None on a row that ran means there is none to report.
ACCURACY_COLUMNS = ("accuracy", "dense_accuracy", "ort_accuracy")


def _accuracy(row: dict[str, Any], col: str, digits: int = 3) -> str:
    """An accuracy, or 'unavailable' where a point ran but has none (e.g. a pretrained
    model without its weights); never a made-up number."""
    value = row.get(col)
    if value is None and row.get("status") in ("ok", "verification_failed"):
        if col != "ort_accuracy" or row.get("precision") == "int8":
            return "unavailable"
    return _fmt(value, digits)


def noise_mark(row: dict[str, Any]) -> str:
    """'noisy (cv 12% > 5%)' for a row whose samples varied more than the sweep allows or
    were taken on a busy machine (the reason says which), else ''."""
    if not row.get("noisy"):
        return ""
    if row.get("noise_reason"):
        return f"noisy ({row['noise_reason']})"
    cv = row.get("latency_cv")  # a row written before noise_reason existed
    return f"noisy (cv {cv:.0%})" if cv is not None else "noisy"


def retake_note(row: dict[str, Any]) -> str:
    """', 2 re-takes for quiet samples' where the measure stage re-took samples, else ''."""
    retries = row.get("load_retries")
    if not retries:
        return ""
    return f", {retries} re-take{'s' if retries != 1 else ''} for quiet samples"


def _cv(row: dict[str, Any]) -> str:
    cv = row.get("latency_cv")
    if cv is None:
        return "-"
    retakes = f" ({row['load_retries']} re-taken)" if row.get("load_retries") else ""
    if not row.get("noisy"):
        return f"{cv:.1%}{retakes}"
    busy = ", busy machine" if row.get("loaded_samples") else ""
    return f"[yellow]{cv:.0%} noisy{busy}[/]{retakes}"


def iqr_ms(row: dict[str, Any]) -> float | None:
    """Interquartile range of a row's samples (the spread that goes with its median):
    from the stored quartiles, else from the raw samples of an older row."""
    q1, q3 = row.get("latency_q1_ms"), row.get("latency_q3_ms")
    if q1 is not None and q3 is not None:
        return float(q3) - float(q1)
    samples = row.get("latency_samples_ms")
    if samples:
        import numpy as np

        lo, hi = np.percentile(np.asarray(samples, dtype=float), [25, 75])
        return float(hi - lo)
    return None


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


class RunConsole:
    def __init__(self, progress: bool = True, console: Console | None = None) -> None:
        self.out = console or make_console()
        #: Live bars only on a terminal; in logs they would be noise, so lines replace them.
        self.progress = progress and self.out.is_terminal

    def note(self, text: str) -> None:
        self.out.print(text)

    def sweep_header(self, config: SweepConfig, points: list[Point], workspace: Workspace) -> None:
        blocked = sum(1 for p in points if p.blocked)
        self.out.print(f"[bold]sweep '{escape(config.name)}'[/]: {len(points)} points "
                       f"({blocked} not runnable); workspace {workspace.root}")

    def point_start(self, i: int, n: int, point: Point) -> None:
        self.out.print(f"[bold]\\[{i}/{n}][/] {escape(point.describe())}")

    def point_skipped(self, i: int, n: int, point: Point, previous: dict[str, Any]) -> None:
        error = escape(f"({previous.get('error_stage')}: {previous.get('error')})")
        self.out.print(f"[bold]\\[{i}/{n}][/] {escape(point.describe())}: [red]failed earlier[/] "
                       f"{error}; "
                       "re-run with --retry-failed to try again")

    def stage(self, name: str, state: str, key: str, seconds: float | None = None) -> None:
        if state == "running":
            self.out.print(f"    {name:<9} computing ... (key {key[:10]})")
        elif state == "done":
            self.out.print(f"    {name:<9} [green]computed[/] in {seconds:.1f}s")
        elif state == "loaded":
            self.out.print(f"    {name:<9} loaded in {seconds:.1f}s")
        elif state == "reused":
            self.out.print(f"    {name:<9} [cyan]reused[/] from cache")
        elif state == "shared":
            self.out.print(f"    {name:<9} [cyan]reused[/]: computed meanwhile by another "
                           "dlas process on this workspace")

    def damaged(self, check: EntryCheck) -> None:
        """A cache entry whose files are not what was written: said, never used."""
        self.out.print(f"    {check.stage:<9} [red]damaged[/] cache entry (key {check.key[:10]}): "
                       f"{escape(check.verdict.describe())}; it is discarded and computed "
                       "again")

    def point_end(self, row: dict[str, Any]) -> None:
        status = row["status"]
        style = _STATUS_STYLE.get(status, "")
        detail = ""
        if status == "ok":
            source = f" ({row['accuracy_source']})" if row.get("accuracy_source") else ""
            from dlas.measure.verify import REFERENCE_NAMES  # lazy: keeps `dlas --help` fast

            reference = REFERENCE_NAMES.get(row.get("verification_reference") or "pytorch",
                                            "PyTorch")
            detail = (f" median {row['latency_median_ms']:.3f} ms, accuracy "
                      f"{_accuracy(row, 'accuracy')}{source}, max |diff| vs {reference} "
                      f"{row['max_abs_diff']:.2e}")
            if row.get("tuning_report"):
                detail += (f", tuning: {row['tasks_tuned']} tasks tuned "
                           f"({row['tuning_trials']} trials), {row['tasks_reused']} reused")
            detail += retake_note(row)
            if noise_mark(row):
                detail += f", [yellow]{escape(noise_mark(row))}[/]"
        elif row.get("error"):
            detail = escape(f" {row.get('error_stage') or ''}: {row['error']}")
        self.out.print(f"    -> [{style}]{status}[/]{detail}")
        fallbacks = row.get("conv_fallbacks") or []
        if fallbacks:
            said = escape(fallback_summary(fallbacks, row.get("algorithm")))
            self.out.print(f"    [yellow]{said}[/] (recorded in conv_fallbacks):")
            for line in fallbacks:
                self.out.print(f"      {line}", markup=False)

    def epoch_reporter(self, what: str) -> Callable[[dict[str, Any], int], None] | None:
        """One line per finished epoch where no live bar shows it (logs, --no-progress)."""
        if self.progress:
            return None

        def report(row: dict[str, Any], total: int) -> None:
            self.out.print(f"      {what} epoch {row['epoch']}/{total}: loss {row['loss']:.4f}, "
                           f"test accuracy {row['val_acc']:.3f} ({row['seconds']:.1f}s)")

        return report

    @contextlib.contextmanager
    def activity(self, text: str) -> Iterator[None]:
        if not self.progress:
            yield
            return
        with self.out.status(text):
            yield

    @contextlib.contextmanager
    def measuring(self, total: int) -> Iterator[Callable[[int], None]]:
        if not self.progress:
            yield lambda n: None
            return
        columns = (TextColumn("    measure  "), BarColumn(), MofNCompleteColumn(),
                   TextColumn("runs"), TimeElapsedColumn())
        with Progress(*columns, console=self.out, transient=True) as bar:
            task = bar.add_task("measure", total=total)
            yield lambda n: bar.advance(task, n)

    def summary(self, report: RunReport) -> None:
        if report.rows:
            self.out.print(results_table(report.rows, title="results of this sweep"))
        stages = Table(title="stages", title_justify="left")
        for col in ("stage", "computed", "reused", "compute time (s)"):
            stages.add_column(col, justify="right" if col != "stage" else "left")
        from dlas.stages import STAGES

        for s in STAGES:
            stages.add_row(s, str(report.computed[s]), str(report.reused[s]),
                           f"{report.seconds[s]:.1f}")
        self.out.print(stages)
        counts = (f"{report.ok} ok, {report.failed} failed, {report.verification_failed} failed "
                  f"verification, {report.not_runnable} not runnable")
        if report.skipped_failed:
            counts += f", {report.skipped_failed} skipped (failed earlier)"
        self.out.print(f"{counts}; wall time {report.wall_seconds:.1f}s")
        damaged = sum(report.damaged.values())
        if damaged:
            self.out.print(f"[red]{damaged} damaged cache entr{'y' if damaged == 1 else 'ies'}"
                           "[/] found (said above) and computed again")
        if report.recomputed_nothing and report.points and not report.interrupted:
            self.out.print("nothing recomputed: every stage was reused from the cache")
        if report.interrupted:
            self.out.print("[yellow]interrupted[/]: completed stages are cached; "
                           "run the same command again to resume")


def results_table(rows: list[dict[str, Any]], title: str = "results",
                  columns: list[str] | None = None) -> Table:
    from dlas.results.store import SUMMARY_COLUMNS

    columns = columns or SUMMARY_COLUMNS
    table = Table(title=title, title_justify="left")
    for col in columns:
        header = {"latency_cv": "cv", "latency_iqr_ms": "IQR ms"}.get(col, col)
        table.add_column(header.replace("latency_", "").replace("_ms", " ms"), overflow="fold")
    for row in rows:
        cells = []
        for col in columns:
            value = row.get(col)
            if col == "status":
                cells.append(f"[{_STATUS_STYLE.get(value, '')}]{value}[/]")
            elif col == "verified":
                cells.append("-" if value is None else ("yes" if value else "NO"))
            elif col == "latency_cv":
                cells.append(_cv(row))
            elif col == "latency_iqr_ms":
                cells.append(escape(_fmt(iqr_ms(row), 4)))
            elif col == "error" and value:
                cells.append(escape(str(value)[:120]))
            elif col in ACCURACY_COLUMNS:
                cells.append(escape(_accuracy(row, col, 4)))
            else:
                cells.append(escape(_fmt(value, 4)))
        table.add_row(*cells)
    return table


def default_workspace() -> Path:
    return Path.cwd() / "dlas-workspace"
