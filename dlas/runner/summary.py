"""The end of a sweep: what the study found, in lines that fit 100 columns.

Why not the results table: a sweep of a few models already makes a table of dozens of
rows, each a variant; what a reader wants when the run ends is the answer to the study's
questions, per model and compression: which TVM variant was fastest (and how much it
beats or trails ONNX Runtime, the tuned baseline of the same model), what tuning bought,
and what the compression cost in accuracy. Then how many points ran, failed, could not
run or were noisy, and which commands show the rest: `dlas results` (every row) and
`dlas report` (the paper's tables, figures and observations). It is built from the rows
alone (`study_lines`), so it is the same whichever executor ran the sweep, and tested on
synthetic rows.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from dlas.results import placed, same_work
from dlas.runner.fit import Column, fit
from dlas.runner.labels import legend_lines, short_labels, split_label

if TYPE_CHECKING:
    from dlas.results.row import ResultRow

#: Width the summary keeps to, whatever the terminal's.
SUMMARY_WIDTH = 100
#: Runtimes whose rows are baselines, not TVM variants (`ResultRow.backend`).
BASELINES = ("onnxruntime", "pytorch")
ORT = "onnxruntime"


def runtime(row: ResultRow) -> str:
    """'tvm' or the baseline runtime that ran the row (rows before `backend` existed name
    the runtime in `tuning`)."""
    if row.backend:
        return row.backend
    name = split_label(row.tuning or "")[0]
    return name if name in BASELINES else "tvm"


def is_tuned(row: ResultRow) -> bool:
    return runtime(row) == "tvm" and split_label(row.tuning or "none")[0] != "none"


def _ms(row: ResultRow | None) -> float | None:
    if row is None or row.status != "ok" or not row.latency_median_ms:
        return None
    return row.latency_median_ms


@dataclass
class ModelRows:
    """The rows of one model and compression (on one dataset and target)."""

    dataset: str | None
    model: str | None
    compression: str | None
    target: str | None
    rows: list[ResultRow] = field(default_factory=list)

    def tvm(self) -> list[ResultRow]:
        return [r for r in self.rows if runtime(r) == "tvm" and _ms(r) is not None]

    @cached_property
    def _ranked_fastest(self) -> tuple[ResultRow, placed.PlacedFigure] | None:
        """Ranked once the group is whole (`groups` builds it before anyone asks)."""
        return placed.fastest(self.tvm())

    @property
    def fastest(self) -> ResultRow | None:
        """The ok TVM row with the smallest median among the rows timed in one placement
        (`dlas.results.placed.fastest`)."""
        return self._ranked_fastest[0] if self._ranked_fastest else None

    @property
    def fastest_ms(self) -> float | None:
        """The fastest row's median in the placement it was ranked in."""
        return self._ranked_fastest[1].median_ms if self._ranked_fastest else None

    @property
    def ort(self) -> ResultRow | None:
        return next((r for r in self.rows if runtime(r) == ORT and _ms(r) is not None), None)

    def tuned(self) -> tuple[ResultRow, placed.Relation] | None:
        """The tuned row that gained most over the same algorithm untuned, and how it
        compares with it (the ratio is untuned median / tuned median, in one placement);
        a pair without a shared placement only when no other is comparable."""
        untuned = {r.algorithm: r for r in self.tvm() if not is_tuned(r)}
        gains = [(r, placed.relate(r, untuned[r.algorithm]))
                 for r in self.tvm() if is_tuned(r) and r.algorithm in untuned]
        return max(gains, key=lambda g: (g[1].ratio is not None, g[1].ratio or 0.0),
                   default=None)

    def accuracy(self) -> tuple[float | None, float | None]:
        """(accuracy, dense accuracy) of the group: the fastest row's, else any row's."""
        ranked = [r for r in [self.fastest, *self.rows] if r is not None]
        acc = next((r.accuracy for r in ranked if r.accuracy is not None), None)
        dense = next((r.dense_accuracy for r in ranked if r.dense_accuracy is not None), None)
        return acc, dense


def groups(rows: Sequence[ResultRow]) -> list[ModelRows]:
    """The rows by dataset, model, compression and target: a model's compressions
    together, each layer's choices in the order they first appear in `rows`."""
    out: dict[tuple[str | None, ...], ModelRows] = {}
    first: dict[tuple[int, str | None], int] = {}
    for row in rows:
        key = (row.dataset, row.model, row.compression, row.target)
        out.setdefault(key, ModelRows(*key)).rows.append(row)
        for i, value in enumerate(key):
            first.setdefault((i, value), len(first))
    return sorted(out.values(), key=lambda g: [first[(i, v)] for i, v in enumerate(
        (g.dataset, g.model, g.compression, g.target))])


@dataclass(frozen=True)
class Counts:
    ok: int
    failed: int
    verification_failed: int
    not_runnable: int
    noisy: int
    #: Noisy rows whose rounds were taken on a busy machine.
    busy: int

    @classmethod
    def of(cls, rows: Sequence[ResultRow]) -> Counts:
        def n(status: str) -> int:
            return sum(1 for r in rows if r.status == status)

        noisy = [r for r in rows if r.noisy]
        return cls(n("ok"), n("failed"), n("verification_failed"), n("not_runnable"),
                   len(noisy), sum(1 for r in noisy if r.loaded_rounds))

    def text(self) -> str:
        return (f"{self.ok} ok, {self.failed} failed, {self.verification_failed} failed "
                f"verification, {self.not_runnable} not runnable, {self.noisy} noisy")


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def ms_text(value: float | None) -> str:
    """A median in ms to about four significant digits, trailing zeros kept (4.290)."""
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 10 else f"{value:.2f}" if value < 100 else f"{value:.1f}"


def _versus(tvm: ResultRow | None, ort: ResultRow | None) -> str:
    """'1.30x faster', '2.10x slower', 'tie (1.04x)' or 'not comparable': the fastest TVM
    variant against ONNX Runtime, both in one placement (`dlas.results.placed.relate`)."""
    if tvm is None or ort is None:
        return "-"
    return placed.relate(tvm, ort).text()


def _gain(label: str, relation: placed.Relation) -> str:
    """'spatial 1.25x', 'spatial tie (1.02x)' or 'spatial not comparable'."""
    if relation.verdict in ("a_faster", "b_faster") and relation.ratio is not None:
        return f"{label} {relation.ratio:.2f}x"
    return f"{label} {relation.text()}"


def _not_ok(group: ModelRows) -> str:
    """What became of a group without an ok TVM row: '2 not runnable, 1 failed'."""
    seen: dict[str, int] = {}
    for row in group.rows:
        if runtime(row) == "tvm":
            seen[row.status] = seen.get(row.status, 0) + 1
    said = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in seen.items())
    return f"- ({said})" if said else "-"


def study_lines(rows: Sequence[ResultRow], *, title: str = "results of this sweep",
                width: int = SUMMARY_WIDTH, config: str = "CONFIG") -> list[str]:
    """The summary of `rows` as plain lines at most `width` wide (a path or a label
    longer than the width excepted): a title with the counts, a line per model and
    compression, the legend of shortened labels, the noisy and failed rows; `config` is
    the sweep file the commands name. The console adds what the sweep decided and the
    commands that show the rest (`more_line`)."""
    counts = Counts.of(rows)
    out = textwrap.wrap(f"{title} ({len(rows)} points: {counts.text()})", width=width,
                        subsequent_indent="  ", break_on_hyphens=False)
    found = groups(rows)
    shorts = {col: short_labels(getattr(r, col) for r in rows)
              for col in ("dataset", "model", "compression", "algorithm", "tuning", "target")}

    used: dict[str, dict[str, str]] = {}  # column -> the labels its cells shortened

    def short(key: str, col: str, value: str | None) -> str:
        if not value:
            return "-"
        used.setdefault(key, {})[value] = shorts[col].get(value, value)
        return used[key][value]

    columns = [Column("model", "model", min_width=8)]
    several = {col: len({getattr(g, col) for g in found}) > 1 for col in ("dataset", "target")}
    if several["dataset"]:
        columns.insert(0, Column("dataset", "dataset", min_width=6))
    columns.append(Column("compression", "compression", min_width=8))
    if several["target"]:
        columns.append(Column("target", "target", min_width=6))
    columns += [Column("fastest", "fastest TVM variant", min_width=10),
                Column("ms", "ms", justify="right"),
                Column("ort", "vs ONNX RT", priority=30),
                Column("tuned", "tuned", min_width=8, priority=20),
                Column("accuracy", "accuracy", justify="right", priority=40)]
    if any(split_label(g.compression or "none")[0] != "none" for g in found):
        columns.append(Column("dense", "dense", justify="right", priority=10))
    cells = []
    for g in found:
        best, ort, tuned = g.fastest, g.ort, g.tuned()
        acc, dense = g.accuracy()
        fastest = _not_ok(g)
        if best is not None:
            fastest = short("fastest", "algorithm", best.algorithm)
            if is_tuned(best):
                fastest += f" + {short('fastest', 'tuning', best.tuning)}"
        values = {
            "dataset": short("dataset", "dataset", g.dataset),
            "model": short("model", "model", g.model),
            "compression": short("compression", "compression", g.compression),
            "target": short("target", "target", g.target),
            "fastest": fastest, "ms": ms_text(g.fastest_ms),
            "ort": _versus(best, ort),
            "tuned": ("-" if tuned is None else
                      _gain(short('tuned', 'algorithm', tuned[0].algorithm), tuned[1])),
            "accuracy": _num(acc),
            "dense": ("" if split_label(g.compression or "none")[0] == "none"
                      else _num(dense)),
        }
        cells.append([values[c.key] for c in columns])
    if found:
        widths = fit(columns, cells, width)
        shown = [(columns[i], w) for i, w in widths.items()]
        out.append(_line([(c.header, c, w) for c, w in shown]))
        out.append(_line([("-" * w, c, w) for c, w in shown]))
        index = {c.key: i for i, c in enumerate(columns)}
        for row in cells:
            out.append(_line([(row[index[c.key]], c, w) for c, w in shown]))
        keys = {c.key for c, _ in shown}
        said = []
        if "ort" in keys:
            said.append("vs ONNX RT: the fastest TVM variant against ONNX Runtime on the "
                        "same model and compression")
        if "tuned" in keys:
            said.append("tuned: the speedup tuning gave an algorithm")
        if keys & {"ort", "tuned"}:
            said.append("both timed in one vCPU placement; tie: their 95% intervals "
                        "overlap; not comparable: no placement in common")
        if "dense" in keys:
            said.append("dense: accuracy before compression")
        out += textwrap.wrap("; ".join(said), width=width, break_on_hyphens=False)
        out += legend_lines({full: s for key in keys for full, s in used.get(key, {}).items()},
                            width)
    out += same_work.lines(same_work.pairs(rows), width)
    if counts.noisy:
        busy = f", {counts.busy} timed on a busy machine" if counts.busy else ""
        out += textwrap.wrap(
            f"noisy: {counts.noisy} point(s) with a wide 95% interval or too few quiet "
            f"rounds{busy}; dlas run {config} --remeasure-noisy times them again",
            width=width, subsequent_indent="  ",
            break_on_hyphens=False)
    bad = counts.failed + counts.verification_failed
    if bad:
        out += textwrap.wrap(f"failed: {bad} point(s); dlas results --status failed (or "
                             "verification_failed) says why", width=width,
                             subsequent_indent="  ", break_on_hyphens=False)
    return out


def cut(text: str, width: int) -> str:
    """`text` cut to `width` characters, the last one an ellipsis when it was longer."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _line(cells: list[tuple[str, Column, int]]) -> str:
    """One line of the summary's table: each cell cut to its width with an ellipsis."""
    parts = []
    for text, col, w in cells:
        text = cut(text, w)
        parts.append(text.rjust(w) if col.justify == "right" else text.ljust(w))
    return "  ".join(parts).rstrip()


def more_line(workspace: str | None = None, report: str = "dlas-workspace/report") -> str:
    """Which commands show the rest. `workspace`: the `--workspace` they need, if any."""
    flag = f" --workspace {workspace}" if workspace else ""
    return (f"see more: dlas results{flag} lists every row (--wide: every column); "
            f"dlas report{flag} writes the HTML report with the paper's tables, figures "
            f"and observations to {report}")
