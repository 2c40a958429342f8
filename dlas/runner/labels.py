"""Short names for option labels in console tables, and the legend that gives them back.

Rows name each layer's choice by its label (`dlas.registry.choice_label`): the option's
name and the parameters set away from their defaults, e.g.
`weight_pruning(level=0.8,levels=[0.5, 0.8])`. In a table those labels take most of a
terminal's width and say the same thing on every row. Within one column (one layer):

- an option that appears with only one parameter set is shown by its bare name
  (`weight_pruning`);
- an option that appears with several keeps only the parameters that tell them apart
  (`direct` and `direct(layout=NCHWc)`; `weight_pruning(level=0.5)` and
  `weight_pruning(level=0.8)` when only `level` differs).

Distinct labels stay distinct: two parameter sets differ in some parameter, and that
parameter is kept. The legend under a table gives every shortened label in full.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_LABEL = re.compile(r"^(?P<name>[^()\s]+)\((?P<inner>.*)\)$", re.DOTALL)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_OPEN, _CLOSE = "([{", ")]}"


def _top_level_parts(inner: str) -> list[str] | None:
    """`inner` split on the commas outside brackets and quotes; None where the brackets do
    not balance."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(inner):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if depth or quote:
        return None
    parts.append(inner[start:])
    return parts


def split_label(label: str) -> tuple[str, dict[str, str]]:
    """(name, parameters as written) of a label in `choice_label`'s form; a label in any
    other form is its own name with no parameters (so it is never shortened)."""
    match = _LABEL.match(label)
    if not match:
        return label, {}
    parts = _top_level_parts(match["inner"])
    params: dict[str, str] = {}
    for part in parts or []:
        key, sep, value = part.partition("=")
        if not sep or not _KEY.match(key.strip()):
            return label, {}
        params[key.strip()] = value
    if not params:
        return label, {}
    return match["name"], params


def short_labels(labels: Iterable[str | None]) -> dict[str, str]:
    """label -> its short form, for the labels of one column (see the module doc)."""
    by_name: dict[str, dict[str, dict[str, str]]] = {}
    for label in dict.fromkeys(x for x in labels if x):
        name, params = split_label(label)
        by_name.setdefault(name, {})[label] = params
    short: dict[str, str] = {}
    for name, variants in by_name.items():
        if len(variants) == 1:
            ((label, params),) = variants.items()
            short[label] = name if params else label
            continue
        keys = sorted({k for params in variants.values() for k in params})
        differ = [k for k in keys if len({params.get(k) for params in variants.values()}) > 1]
        for label, params in variants.items():
            if not params:  # not choice_label's form, or the option at its defaults
                short[label] = label
                continue
            kept = ",".join(f"{k}={params[k]}" for k in differ if k in params)
            short[label] = f"{name}({kept})" if kept else name
    return short


def wrap(text: str, width: int, first: str = "", rest: str = "") -> list[str]:
    """`text` in lines of at most `width`, broken after spaces and after the commas
    between a label's parameters (`textwrap` would break `trials_per_iter` in two), a
    piece longer than a line cut where it must. `first` and `rest` start the lines."""
    pieces = [p for p in re.split(r"(?<=[,\s])", text) if p]
    lines = [first]
    for piece in pieces:
        room = width - len(lines[-1])
        if len(piece.rstrip()) > room and lines[-1].strip():
            lines[-1] = lines[-1].rstrip()
            lines.append(rest)
            piece = piece.lstrip()
            room = width - len(rest)
        while len(piece.rstrip()) > room > 0:  # longer than a whole line
            lines[-1] += piece[:room]
            piece = piece[room:]
            lines.append(rest)
            room = width - len(rest)
        lines[-1] += piece
    return [line.rstrip() for line in lines if line.strip()]


def legend_lines(shortened: Mapping[str, str], width: int, prefix: str = "legend: "
                 ) -> list[str]:
    """'legend: resnet18 = resnet18(width_multiplier=0.5); ...' for the labels shown
    shorter than they are (none: no lines): whole entries packed into lines of at most
    `width`, an entry longer than a line wrapped on its own."""
    entries = sorted({f"{short} = {full}" for full, short in shortened.items() if short != full})
    indent = " " * len(prefix)
    lines: list[str] = []
    packable = False  # whether the last line holds whole entries only
    for entry in entries:
        if packable and len(lines[-1]) + 2 + len(entry) <= width:
            lines[-1] += f"; {entry}"
            continue
        wrapped = wrap(entry, max(width, len(prefix) + 20),
                       first=prefix if not lines else indent, rest=indent + "  ")
        lines += wrapped
        packable = len(wrapped) == 1
    return lines
