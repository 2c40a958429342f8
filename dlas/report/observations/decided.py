"""The observations a sweep decided, as a few plain lines for the end of `dlas run`.

A new user's run should end on what it found, not only on a table of times: which of the
paper's observations its rows decide and how (held, not held), with the numbers each
rests on. The report gives the evidence; these lines point there.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from dlas.report.observations.rules import observations
from dlas.report.observations.verdict import HELD, NOT_HELD, Observation
from dlas.runner.summary import cut


def _cut(indent: str, text: str, width: int) -> str:
    """`indent` + `text` (its whitespace runs made single spaces) on one line of at most
    `width`, cut with an ellipsis."""
    return cut(indent + " ".join(text.split()), width)


def decided_lines(found: list[Observation], width: int = 100) -> list[str]:
    """Two lines per decided observation (its claim, then its key numbers), each at most
    `width` wide, and one line for those the sweep could not decide."""
    decided = [o for o in found if o.status in (HELD, NOT_HELD)]
    if not found:
        return []
    out = [_cut("", "observations this sweep decided (the paper's numbering; dlas report "
                "shows the evidence):", width)]
    for o in decided:
        out.append(_cut(f"  {o.roman:<5} ", f"{o.status_label}: {o.claim}", width))
        if o.key_numbers:
            out.append(_cut(" " * 8, o.key_numbers, width))
    if not decided:
        out.append("  none: this sweep's rows decide none of them")
    rest = len(found) - len(decided)
    if rest:
        out += textwrap.wrap(f"  {rest} undecided: a tie within the intervals, or layers "
                             "this sweep does not vary (the report says what would decide "
                             "each)", width=width, subsequent_indent="    ")
    return out


def sweep_decided_lines(db_path: Path, sweep: str, width: int = 100) -> list[str]:
    """`decided_lines` for the latest rows of `sweep` in the results at `db_path`."""
    from dlas.report.data import latest_per_label, load_points
    from dlas.report.paper import load_paper

    points, _ = latest_per_label(load_points(db_path, [sweep]))
    if not points:
        return []
    return decided_lines(observations(points, load_paper()), width)
