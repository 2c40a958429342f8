"""What a sweep prints: per-point stage lines, progress for long work, the closing tables."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from dlas.compiler.fallbacks import by_reason as fallback_reasons
from dlas.compiler.fallbacks import summary as fallback_summary
from dlas.measure.placement import FAR
from dlas.results.drift import widened
from dlas.runner.eta import TIMED, RunningEstimate
from dlas.runner.fit import Column, Footnotes, fitted_table, left_out_line
from dlas.runner.labels import legend_lines, short_labels, wrap
from dlas.runner.summary import ms_text

if TYPE_CHECKING:
    from dlas.results.row import ResultRow
    from dlas.runner.cache import EntryCheck
    from dlas.runner.workspace import RunReport, Workspace
    from dlas.sweep.config import SweepConfig
    from dlas.sweep.grid import Point

_STATUS_STYLE = {"ok": "green", "failed": "red", "verification_failed": "red bold",
                 "not_runnable": "yellow"}


#: Width of output that is not a terminal (logs, CI, a pipe) when $COLUMNS does not say
#: one: wide enough that log lines do not fold.
PIPE_WIDTH = 240


def make_console() -> Console:
    """Rich console as wide as the terminal. $COLUMNS, where set, wins (rich reads it
    itself when given no width), so `COLUMNS=120 dlas results | less` lays tables out
    for 120 columns; output that is not a terminal and has no $COLUMNS (logs, CI) gets
    `PIPE_WIDTH`, wide enough not to fold."""
    columns = os.environ.get("COLUMNS", "")
    width = None if columns.isdigit() or sys.stdout.isatty() else PIPE_WIDTH
    # no `file`: rich then writes to whatever sys.stdout is at print time
    return Console(highlight=False, soft_wrap=True, width=width)


#: Accuracy columns: None on a row that ran means there is none to report.
ACCURACY_COLUMNS = ("accuracy", "dense_accuracy", "ort_accuracy")


def _accuracy(row: ResultRow, col: str, digits: int = 3) -> str:
    """An accuracy, or 'unavailable' where a point ran but has none (e.g. a pretrained
    model without its weights); never a made-up number."""
    value = getattr(row, col)
    if value is None and row.status in ("ok", "verification_failed"):
        if col != "ort_accuracy" or row.precision == "int8":
            return "unavailable"
    return _fmt(value, digits)


def noise_mark(row: ResultRow) -> str:
    """'noisy (95% CI 12% of the median > 5%)' for a row whose interval is too wide or
    whose rounds were taken on a busy machine (the reason says which), else ''."""
    if not row.noisy:
        return ""
    return f"noisy ({row.noise_reason})" if row.noise_reason else "noisy"


def retake_note(row: ResultRow) -> str:
    """', 2 rounds re-taken for quiet samples' where the worker re-took rounds, else ''."""
    retries = row.load_retries
    if not retries:
        return ""
    return f", {retries} round{'s' if retries != 1 else ''} re-taken for quiet samples"


def _interval(lo: float | None, hi: float | None, digits: int) -> str:
    return "-" if lo is None or hi is None else f"[{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


def ci_text(row: ResultRow, digits: int = 4) -> str:
    """'[1.38, 1.41]': the 95% interval of the median, '-' without one."""
    return _interval(row.latency_ci_low_ms, row.latency_ci_high_ms, digits)


def next_run_text(row: ResultRow, digits: int = 4) -> str:
    """'[1.31, 1.49]': where the next independent run lands (95%), '-' without it."""
    return _interval(row.next_run_low_ms, row.next_run_high_ms, digits)


def drift_line(rows: list[ResultRow]) -> str | None:
    """'tvm ±6.1% (this machine, 84 pairs), onnxruntime ±12.7% (prior ...)': the drift
    each runtime's next-run range was widened by, as the rows recorded it: the runtime's
    own (its narrowest row that its chunks did not widen), and how many rows their own
    chunks' spread widened further (`dlas.results.drift.row_drift`)."""
    by_runtime: dict[str, list[ResultRow]] = {}
    for row in rows:
        if row.next_run_drift is not None and row.backend:
            by_runtime.setdefault(row.backend, []).append(row)
    parts = []
    for runtime, mine in by_runtime.items():
        plain = [r for r in mine if not widened(r.next_run_basis)]
        wider = len(mine) - len(plain)
        if not plain:  # no row shows the runtime's own drift
            low, high = (f(r.next_run_drift or 0.0 for r in mine) for f in (min, max))
            parts.append(f"{runtime} ±{100 * math.expm1(low):.1f}% to "
                         f"±{100 * math.expm1(high):.1f}% (every row by its own chunks' "
                         "spread)")
            continue
        base = min(plain, key=lambda r: r.next_run_drift or 0.0)
        parts.append(f"{runtime} ±{100 * math.expm1(base.next_run_drift or 0.0):.1f}% "
                     f"({base.next_run_basis}" + (f"; {wider} row{'' if wider == 1 else 's'} "
                                                  "wider, by their own chunks' spread"
                                                  if wider else "") + ")")
    return ", ".join(parts) or None


def interval_notes(rows: list[ResultRow], shown: Any, width: int = 100) -> list[str]:
    """What the shown intervals are (the CI within the run, the next run's range) and
    what a far row is, in lines of at most `width`."""
    out = []
    if "latency_ci_ms" in shown:
        out.append("95% CI: the median's interval within this point's own runs (what "
                   "comparisons within one sweep use)")
    drift = drift_line(rows)
    if "next_run_ms" in shown:
        out.append("next run: where an independent run of the point lands (95%) in the same "
                   "vCPU placement, the median widened by this machine's run-to-run drift, "
                   "or by the spread of the row's own chunks where that is wider"
                   + (f": {drift}" if drift else ""))
    if any(row.placement == FAR for row in rows):
        out.append("far: timed while the two vCPUs sat on distant cores, which slows "
                   "multi-threaded runs (1.1-1.6x on the VMs measured); compare it with far rows "
                   "only (docs/timing.md)")
    return [line for note in out for line in wrap(note, max(width, 40), rest="  ")]


def _ci_cell(row: ResultRow) -> str:
    text = ci_text(row)
    if not row.noisy:
        return text
    busy = ", busy machine" if row.loaded_rounds else ""
    return f"[yellow]{escape(text)} noisy{busy}[/]"


def timing_detail(row: ResultRow) -> str:
    """'median 1.391 ms [1.385, 1.398] in this run, next run [1.26, 1.54] (near placement,
    10 rounds)': both kinds of interval, each named."""
    where = f"{row.placement} placement" if row.placement else "placement unknown"
    rounds = f", {row.timing_rounds} rounds" if row.timing_rounds else ""
    runs = (f", {row.timing_runs} timing runs (spread {row.run_spread:.1%})"
            if row.timing_runs and row.timing_runs > 1 and row.run_spread is not None else "")
    within = "in these runs" if row.timing_runs and row.timing_runs > 1 else "in this run"
    nxt = (f", next run {next_run_text(row)}" if row.next_run_low_ms is not None else "")
    return (f"median {row.latency_median_ms:.3f} ms {ci_text(row, 4)} {within}{nxt} "
            f"({where}{rounds}{runs})")


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def clock(seconds: float) -> str:
    """'45s', '2m10s', '1h05m'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class RunConsole:
    def __init__(self, progress: bool = True, console: Console | None = None) -> None:
        self.out = console or make_console()
        #: Live bars only on a terminal; in logs they would be noise, so lines replace them.
        self.progress = progress and self.out.is_terminal
        #: The run's results table in its summary; a run in timing passes
        #: (`dlas.runner.passes`) prints it once, after the last pass.
        self.table_in_summary = True
        #: The run's workspace (`sweep_header`) and sweep file (the command line's), for
        #: the commands the summary names.
        self.workspace_root: Path | None = None
        self.config_path: str | None = None
        #: The run's estimate (`dlas plan --estimate`, s) and its start: each point's line
        #: says how far along the run is against it.
        self.estimated_s: float | None = None
        #: The same estimate per stage, corrected as stages finish (`dlas.runner.eta`).
        self.eta: RunningEstimate | None = None
        #: Timed (stage, key)s counted when their group's rounds ended (`timed`), whose
        #: point's line is still to come and must not count them again.
        self._timed_ahead: Counter[tuple[str, str]] = Counter()
        self.started: float | None = None
        #: Lines the summary adds after the study table, given its width: the CLI gives
        #: the observations the sweep decided (the report sits above the runner).
        self.findings: Callable[[int], list[str]] | None = None

    def note(self, text: str) -> None:
        self.out.print(text)

    def sweep_header(self, config: SweepConfig, points: list[Point], workspace: Workspace) -> None:
        self.workspace_root = workspace.root
        if self.started is None:  # a later timing pass goes on with the same clock
            self.started = time.monotonic()
        blocked = sum(1 for p in points if p.blocked)
        self.out.print(f"[bold]sweep '{escape(config.name)}'[/]: {len(points)} points "
                       f"({blocked} not runnable); workspace {workspace.root}")

    def point_start(self, i: int, n: int, point: Point) -> None:
        self.out.print(f"[bold]\\[{i}/{n}][/] {escape(point.describe())}{self.elapsed()}")

    def elapsed(self) -> str:
        """'  (2m10s of ~11m estimated)': the run's progress against its estimate."""
        if self.started is None:
            return ""
        spent = time.monotonic() - self.started
        if not self.estimated_s:
            return f"  [dim]({clock(spent)})[/]"
        if self.eta is not None and self.eta.done_s > 0:
            projected = self.eta.projected_s(spent)
            if abs(projected - self.estimated_s) > 0.05 * self.estimated_s:
                return (f"  [dim]({clock(spent)} of ~{clock(projected)}, at this run's pace; "
                        f"~{clock(self.estimated_s)} estimated)[/]")
        if spent > self.estimated_s:
            return f"  [dim]({clock(spent)}, over the ~{clock(self.estimated_s)} estimate)[/]"
        return f"  [dim]({clock(spent)} of ~{clock(self.estimated_s)} estimated)[/]"

    def point_skipped(self, i: int, n: int, point: Point, previous: ResultRow) -> None:
        error = escape(f"({previous.error_stage}: {previous.error})")
        self.out.print(f"[bold]\\[{i}/{n}][/] {escape(point.describe())}: [red]failed earlier[/] "
                       f"{error}; "
                       "re-run with --retry-failed to try again")

    def stage(self, name: str, state: str, key: str, seconds: float | None = None) -> None:
        if self.eta is not None and state in ("done", "ahead", "shared") \
                and name not in TIMED:  # a timed stage counts at its point's end, each pass
            self.eta.finished(name, key)
        if state == "running":
            self.out.print(f"    {name:<9} computing ... (key {key[:10]})")
        elif state == "done":
            self.out.print(f"    {name:<9} [green]computed[/] in {seconds:.1f}s")
        elif state == "loaded":
            self.out.print(f"    {name:<9} loaded in {seconds:.1f}s")
        elif state == "ahead":
            self.out.print(f"    {name:<9} [green]computed[/] on a spare core in {seconds:.1f}s")
        elif state == "reused":
            self.out.print(f"    {name:<9} [cyan]reused[/] from cache")
        elif state == "shared":
            self.out.print(f"    {name:<9} [cyan]reused[/]: computed meanwhile by another "
                           "dlas process on this workspace")

    def damaged(self, check: EntryCheck) -> None:
        """A cache entry whose files are not what was written: said, never used."""
        self.out.print(f"    {check.stage:<9} [red]damaged[/] cache entry (key "
                       f"{check.key[:10]}): {escape(check.verdict.describe())}; it is "
                       "discarded and computed again")

    def timed(self, stage: str, key: str) -> None:
        """A timing group's member was timed in this pass: its share of the estimate counts
        now, not at its point's line. The group's lines come one after another once its
        rounds end, and a projection printed between them counted the group's seconds as
        spent but only the members already printed as done (a quickstart's read 2m39s,
        then 2m32s, 2m26s and 2m17s within a second)."""
        if self.eta is None:
            return
        self.eta.finished(stage, key)
        self._timed_ahead[(stage, key)] += 1

    def point_end(self, row: ResultRow) -> None:
        if self.eta is not None and row.timing_key:
            # every timing pass ends its points here, not through `stage`
            task = ("measure" if row.backend in (None, "tvm") else "baseline", row.timing_key)
            if self._timed_ahead[task] > 0:  # counted when its group was timed
                self._timed_ahead[task] -= 1
            else:
                self.eta.finished(*task)
        status = row.status
        style = _STATUS_STYLE.get(status, "")
        detail = ""
        if status == "ok":
            source = f" ({row.accuracy_source})" if row.accuracy_source else ""
            from dlas.measure.verify import REFERENCE_NAMES  # lazy: keeps `dlas --help` fast

            reference = REFERENCE_NAMES.get(row.verification_reference or "pytorch",
                                            "PyTorch")
            detail = (f" {timing_detail(row)}, accuracy {_accuracy(row, 'accuracy')}{source}, "
                      f"max |diff| vs {reference} {_fmt(row.max_abs_diff)}")
            if row.tuning_report:
                detail += (f", tuning: {row.tasks_tuned} tasks tuned "
                           f"({row.tuning_trials} trials), {row.tasks_reused} reused")
            detail += retake_note(row)
            if noise_mark(row):
                detail += f", [yellow]{escape(noise_mark(row))}[/]"
        elif row.error:
            detail = escape(f" {row.error_stage or ''}: {row.error}")
        self.out.print(f"    -> [{style}]{status}[/]{detail}")
        fallbacks = row.conv_fallbacks or []
        if fallbacks:
            said = escape(fallback_summary(fallbacks, row.algorithm))
            self.out.print(f"    [yellow]{said}[/] (every conv's shape in conv_fallbacks):")
            for line in fallback_reasons(fallbacks):
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

    @contextlib.contextmanager
    def timing(self, title: str, labels: list[str], min_rounds: int
               ) -> Iterator[Callable[[int, str, float | None], None]]:
        """A timing group (`dlas.runner.timing_groups`): what is timed, a line (or a live bar)
        per round with its vCPU placement, and how the rounds fell out."""
        self.out.print(f"    timing    {len(labels)} variant(s) of {escape(title)}, "
                       "interleaved in a fresh worker:")
        for label in labels:
            self.out.print(f"      {escape(label)}")
        seen: dict[str, int] = {}

        def on_round(i: int, placement: str, rt_ns: float | None) -> None:
            seen[placement] = seen.get(placement, 0) + 1
            if not self.progress:
                rt = f" ({rt_ns:.0f} ns)" if rt_ns else ""
                self.out.print(f"      round {i}: {placement}{rt}")

        if not self.progress:
            yield on_round
        else:
            columns = (TextColumn("    timing   "), BarColumn(), MofNCompleteColumn(),
                       TextColumn("rounds {task.fields[where]}"), TimeElapsedColumn())
            with Progress(*columns, console=self.out, transient=True) as bar:
                task = bar.add_task("timing", total=min_rounds, where="")

                def live(i: int, placement: str, rt_ns: float | None) -> None:
                    on_round(i, placement, rt_ns)
                    where = ", ".join(f"{k} {v}" for k, v in seen.items())
                    bar.update(task, completed=min(i, min_rounds), where=f"({where})")

                yield live
        where = ", ".join(f"{n} {state}" for state, n in seen.items()) or "none"
        self.out.print(f"    timing    {sum(seen.values())} rounds ({where})")

    def summary(self, report: RunReport) -> None:
        """The end of a run: the stage tallies and counts, then what the study found
        (`dlas.runner.summary`), which ends with the commands that show the rest."""
        self.counts(report)
        if report.rows and self.table_in_summary:
            self.results(report)

    def results(self, report: RunReport) -> None:
        """The study summary of the run's rows, at most `SUMMARY_WIDTH` wide."""
        from dlas.runner.summary import SUMMARY_WIDTH, more_line, study_lines

        flag, report_dir = _workspace_flag(self.workspace_root)
        width = min(self.out.width, SUMMARY_WIDTH)
        lines = study_lines(report.rows, width=width, config=self.config_path or "CONFIG")
        if self.findings is not None:
            try:
                lines += self.findings(width)
            except Exception as exc:  # noqa: BLE001 - the run's rows are stored already
                lines.append(f"observations: not decided here ({type(exc).__name__}: {exc}); "
                             "dlas report decides them")
        lines += textwrap.wrap(more_line(flag, report_dir), width=width,
                               subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False)
        for line in lines:
            self.out.print(line, markup=False, highlight=False, soft_wrap=True)

    def counts(self, report: RunReport) -> None:
        """The stage tallies and point counts of a run (or of one timing pass)."""
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


def results_table(rows: list[ResultRow], title: str = "results",
                  columns: list[str] | None = None) -> Table:
    """Every row with every column of `columns` (default `SUMMARY_COLUMNS`), cells folded
    to fit: `dlas results --wide`. The default view is `print_results`."""
    from dlas.results.store import SUMMARY_COLUMNS

    columns = columns or SUMMARY_COLUMNS
    table = Table(title=title, title_justify="left")
    headers = {"latency_ci_ms": "95% CI ms", "latency_iqr_ms": "IQR ms",
               "latency_median_ms": "median ms", "next_run_ms": "next run ms"}
    for col in columns:
        table.add_column(headers.get(col, col), overflow="fold")
    for row in rows:
        cells = []
        for col in columns:
            if col == "latency_ci_ms":
                cells.append(_ci_cell(row))
                continue
            if col == "next_run_ms":
                cells.append(next_run_text(row))
                continue
            value = getattr(row, col)
            if col == "status":
                cells.append(f"[{_STATUS_STYLE.get(value, '')}]{value}[/]")
            elif col == "verified":
                cells.append("-" if value is None else ("yes" if value else "NO"))
            elif col == "error" and value:
                cells.append(escape(str(value)[:120]))
            elif col in ACCURACY_COLUMNS:
                cells.append(escape(_accuracy(row, col, 4)))
            else:
                cells.append(escape(_fmt(value, 4)))
        table.add_row(*cells)
    return table


#: What `dlas results` shows by default: the columns a reader compares rows by, one line
#: a row at 120 columns (`--wide`: `SUMMARY_COLUMNS`; `--columns`: any of `column_names`).
BRIEF_COLUMNS = ["status", "model", "compression", "algorithm", "tuning",
                 "latency_median_ms", "next_run_ms", "accuracy", "note"]
#: Columns computed from a row rather than stored as a field.
DERIVED_COLUMNS = ("latency_ci_ms", "next_run_ms", "latency_iqr_ms", "note")
#: Columns holding option labels, shortened in the brief view (`dlas.runner.labels`).
LABEL_COLUMNS = ("dataset", "model", "compression", "algorithm", "tuning", "target")
#: Which brief columns give way first when the terminal is narrow (lowest first); the
#: rest are never left out.
_PRIORITY = {"note": 10, "latency_ci_ms": 20, "next_run_ms": 20, "accuracy": 30}
#: 'verification_failed' is the widest cell of its column: six characters more for the note.
_BRIEF_STATUS = {"verification_failed": "verify_failed"}
_BRIEF_HEADERS = {"latency_median_ms": "median", "latency_ci_ms": "95% CI",
                  "next_run_ms": "next run", "latency_iqr_ms": "IQR"}


def column_names() -> list[str]:
    """Every name `dlas results --columns` takes: the row's fields and the derived ones."""
    from dlas.results.row import ResultRow

    return [*ResultRow.model_fields, *DERIVED_COLUMNS]


def row_note(row: ResultRow) -> str:
    """A row's note: why it failed or could not run (its first line; a failure says the
    stage), or its noisy mark (why: `--columns ...,noise_reason`)."""
    if row.status != "ok" and row.error and row.error.strip():
        first = row.error.strip().splitlines()[0]
        stage = row.error_stage if row.status != "not_runnable" else None
        return f"{stage}: {first}" if stage else first
    marks = (["noisy"] if row.noisy else []) + (
        ["far"] if row.placement == FAR else [])
    return ", ".join(marks)


def _is_number(col: str) -> bool:
    """Whether a column holds numbers (right-aligned, never cut)."""
    from dlas.results.row import ResultRow

    if col == "latency_iqr_ms":
        return True
    field = ResultRow.model_fields.get(col)
    if field is None:
        return False
    kinds = set(get_args(field.annotation)) or {field.annotation}
    return bool(kinds & {int, float})


def _brief_cell(row: ResultRow, col: str, labels: dict[str, dict[str, str]]) -> Text:
    if col == "status":
        return Text(_BRIEF_STATUS.get(row.status, row.status),
                    style=_STATUS_STYLE.get(row.status, ""))
    if col == "note":
        return Text(row_note(row), style="yellow" if row.status == "ok" else "")
    if col in ("latency_ci_ms", "next_run_ms"):
        lo, hi = ((row.latency_ci_low_ms, row.latency_ci_high_ms) if col == "latency_ci_ms"
                  else (row.next_run_low_ms, row.next_run_high_ms))
        text = "-" if lo is None or hi is None else f"[{ms_text(lo)}, {ms_text(hi)}]"
        return Text(text, style="yellow" if row.noisy else "")
    value = row.latency_iqr_ms if col == "latency_iqr_ms" else getattr(row, col)
    if col.startswith("latency_") and col.endswith("_ms") and _is_number(col):
        return Text(ms_text(value))
    if col in LABEL_COLUMNS and value:
        return Text(labels[col].get(value, value))
    if col == "verified":
        return Text("-" if value is None else ("yes" if value else "NO"))
    if col in ACCURACY_COLUMNS:
        return Text(_accuracy(row, col, 4))
    text = _fmt(value, 4)
    return Text(text.splitlines()[0] if text.strip() else text)


def _brief_column(col: str, picked: bool) -> Column:
    header = _BRIEF_HEADERS.get(col, col)
    number = _is_number(col)
    priority = None if picked else _PRIORITY.get(col, None if col in BRIEF_COLUMNS else 5)
    flexible = col in ("note", "error")
    min_width = 5 if flexible else 8 if col in LABEL_COLUMNS or not number else None
    if col == "status":
        min_width = None
    return Column(col, header, justify="right" if number else "left", priority=priority,
                  min_width=min_width, flexible=flexible)


def print_results(out: Console, rows: list[ResultRow], title: str,
                  columns: list[str] | None = None) -> None:
    """The results as one line a row in `out`'s width (`dlas results`): `columns`
    (default `BRIEF_COLUMNS`; a column asked for is never left out), option labels
    shortened with a legend under the table, a note that does not fit given in full
    below it, and the columns left out for width named."""
    picked = columns is not None
    columns = columns or BRIEF_COLUMNS
    labels = {col: short_labels(getattr(r, col) for r in rows)
              for col in LABEL_COLUMNS if col in columns}
    specs = [_brief_column(col, picked) for col in columns]
    cells = [[_brief_cell(row, col, labels) for col in columns] for row in rows]
    footnotes = Footnotes()
    fitted = fitted_table(specs, cells, out.width, footnotes=footnotes)
    times = [c for c in ("latency_median_ms", "latency_ci_ms", "next_run_ms")
             if c in fitted.widths]
    if times:
        title += "; times in ms"
    fitted.table.title = title
    out.print(fitted.table)
    notes = interval_notes(rows, fitted.widths, out.width)
    shown = {full: short for col, table in labels.items() if col in fitted.widths
             for full, short in table.items()}
    for line in [*legend_lines(shown, out.width), *notes, *footnotes.lines(out.width),
                 *left_out_line(fitted, "--wide, --columns or a wider terminal shows them")]:
        out.print(line, markup=False, highlight=False)


def default_workspace() -> Path:
    return Path.cwd() / "dlas-workspace"


def _workspace_flag(root: Path | None) -> tuple[str | None, str]:
    """(the `--workspace` value commands need to find `root`, None where their default
    finds it; the report's default folder as the user would type it)."""
    if root is None:
        return None, "WORKSPACE/report"
    default = Path(os.environ.get("DLAS_WORKSPACE") or default_workspace())
    try:
        shown = str(Path(root).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        shown = str(root)
    same = Path(root).resolve() == default.resolve()
    return (None if same else shown), str(Path(shown) / "report")
