"""Console tables that fit the terminal they are printed in: one line per row, cells cut
with an ellipsis, the least important columns left out when even that is too wide.

Why: given a table wider than the terminal, rich folds every cell, and a 16-column
results table became twelve lines per row at 120 columns, its cells cut to four
characters. Here each column says how much it matters and how far it may shrink, `fit`
decides the widths before rich lays the table out, and a row is always one line. What a
cut cell loses stays reachable: a note that does not fit is numbered and given in full
under the table (`Footnotes`), and the columns left out are named.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.table import Table
from rich.text import Text

#: Characters between two columns.
GAP = 2


@dataclass(frozen=True)
class Column:
    """How one column of a fitted table may give way to the width."""

    key: str
    header: str
    justify: Literal["left", "right"] = "left"
    #: Columns are left out lowest first when the width runs out; None: never left out.
    priority: int | None = None
    #: Narrowest it may be cut to (with an ellipsis); None: never cut (numbers, names).
    min_width: int | None = None
    #: Widest it is shown; longer cells are cut.
    max_width: int | None = None
    #: Takes the width the others leave (a note, a reason); it gives way first.
    flexible: bool = False


Cell = str | Text


def _text(cell: Cell) -> Text:
    """A cell as Text: plain strings are never read as rich markup ("list[float]")."""
    return cell if isinstance(cell, Text) else Text(cell)


def fit(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
        gap: int = GAP) -> dict[int, int]:
    """{column index: width} of the columns shown, in order, so that the table is at
    most `width` wide: the flexible columns give way first, then columns are left out
    lowest priority first, then the cuttable ones shrink to their minimum. Where even
    that is too wide (a terminal narrower than the essential columns), rich cuts the rest.
    """
    natural = []
    for i, col in enumerate(columns):
        n = max([len(col.header), *(_text(row[i]).cell_len for row in rows)])
        natural.append(min(n, col.max_width) if col.max_width else n)
    shown = list(range(len(columns)))
    while True:
        widths = {i: natural[i] for i in shown}
        excess = sum(widths.values()) + gap * (len(shown) - 1) - width
        for i in shown:
            if excess <= 0:
                break
            if columns[i].flexible:
                give = min(excess, max(0, widths[i] - (columns[i].min_width or 1)))
                widths[i] -= give
                excess -= give
        if excess <= 0:
            return widths
        droppable = [i for i in shown if columns[i].priority is not None]
        if droppable and len(shown) > 1:
            # lowest priority first; of equals, the rightmost
            shown.remove(min(droppable, key=lambda i: (columns[i].priority, -i)))
            continue
        cuttable = [i for i in shown if columns[i].min_width is not None
                    and not columns[i].flexible]
        while excess > 0:  # a character at a time off the widest: every label keeps most
            above = [i for i in cuttable if widths[i] > (columns[i].min_width or 1)]
            if not above:
                break
            widths[max(above, key=lambda i: (widths[i], i))] -= 1
            excess -= 1
        return widths


@dataclass
class Fitted:
    """A table laid out for a width, and what the layout left out."""

    table: Table
    #: key -> width of the columns shown.
    widths: dict[str, int]
    #: Headers of the columns left out for want of width.
    left_out: list[str] = field(default_factory=list)


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int,
                 title: str | None = None, footnotes: Footnotes | None = None) -> Fitted:
    """`rows` (one cell per column) as a rich table at most `width` wide, one line a row.

    A compact style (no outer border, two spaces between columns) leaves the width to
    the cells. With `footnotes`, a flexible column's cell that is cut is numbered and
    kept there in full."""
    widths = fit(columns, rows, width)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 1, 0, 0), expand=False)
    for i, w in widths.items():
        col = columns[i]
        table.add_column(col.header, justify=col.justify, width=w, no_wrap=True,
                         overflow="ellipsis")
    for row in rows:
        cells = []
        for i, w in widths.items():
            text = _text(row[i])
            if footnotes is not None and columns[i].flexible and text.cell_len > w:
                text = Text(footnotes.cell(text.plain, w), style=text.style)
            cells.append(_cut(text, w))
        table.add_row(*cells)
    return Fitted(table, {columns[i].key: w for i, w in widths.items()},
                  [c.header for i, c in enumerate(columns) if i not in widths])


def _cut(text: Text, width: int) -> Text:
    """`text` on one line of `width` cells, ending in an ellipsis where it was cut."""
    text = text.copy()
    text.no_wrap = True
    text.overflow = "ellipsis"
    if text.cell_len > width:
        text.truncate(width, overflow="ellipsis")
    return text


class Footnotes:
    """Notes too long for their cell: the cell shows `[n] ` and the note's start, and
    `lines` gives each note once, in full. Past `limit` notes, the rest are counted."""

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit
        self.notes: dict[str, int] = {}  # note -> rows carrying it
        self.more = 0

    def cell(self, note: str, width: int | None) -> str:
        """What a cell `width` wide shows of `note` (all of it when it fits)."""
        if width is None or len(note) <= width:
            return note
        if note not in self.notes and len(self.notes) >= self.limit:
            self.more += 1
            return note
        self.notes[note] = self.notes.get(note, 0) + 1
        marker = f"[{list(self.notes).index(note) + 1}]"
        # a start of a few letters says nothing: then the marker alone
        return marker if width - len(marker) < 9 else f"{marker} {note}"

    def lines(self, width: int, heading: str = "notes in full:") -> list[str]:
        if not self.notes:
            return []
        out = [heading]
        for n, (note, rows) in enumerate(self.notes.items(), 1):
            said = f"[{n}] ({rows} rows) " if rows > 1 else f"[{n}] "
            out += textwrap.wrap(note, width=max(width, 20), initial_indent=said,
                                 subsequent_indent=" " * len(said), break_on_hyphens=False)
        if self.more:
            out.append(f"and {self.more} more row(s) with other notes (--json shows them)")
        return out


def left_out_line(fitted: Fitted, hint: str = "a wider terminal shows them") -> list[str]:
    """'left out for width: 95% CI, note (...)', or nothing when every column is shown."""
    if not fitted.left_out:
        return []
    return [f"left out for width: {', '.join(fitted.left_out)} ({hint})"]
