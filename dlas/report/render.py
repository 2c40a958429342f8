"""A small document model rendered twice: Markdown (figures as PNG files beside it) and a
self-contained HTML page (figures embedded as base64), so both say exactly the same."""

from __future__ import annotations

import base64
import html
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Cell:
    """A table cell; `differs` marks a cell where our result and the paper's disagree."""

    text: str
    differs: bool = False


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Para:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell | str]]
    caption: str = ""


@dataclass
class Image:
    path: Path
    caption: str


Block = Heading | Para | Bullets | Table | Image


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def _cell(c: Cell | str) -> Cell:
    return c if isinstance(c, Cell) else Cell(str(c))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


DIFF_MARK = " ≠"


def to_markdown(doc: Document, base: Path) -> str:
    """Markdown whose image links are relative to `base` (the .md file's folder)."""
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += [f"{'#' * b.level} {b.text}", ""]
        elif isinstance(b, Para):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {item}" for item in b.items] + [""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"*{b.caption}*", ""]
            out.append("| " + " | ".join(_md_escape(c) for c in b.columns) + " |")
            out.append("|" + "---|" * len(b.columns))
            for row in b.rows:
                cells = [_cell(c) for c in row]
                out.append("| " + " | ".join(
                    _md_escape(c.text) + (DIFF_MARK if c.differs else "") for c in cells) + " |")
            out.append("")
        elif isinstance(b, Image):
            rel = Path(os.path.relpath(b.path, base)).as_posix()
            out += [f"![{b.caption}]({rel})", "", f"*{b.caption}*", ""]
    return "\n".join(out)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.differs { background: #fde2e1; font-weight: 600; }
caption { caption-side: top; text-align: left; font-style: italic; padding: 4px 0; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-style: italic; font-size: 0.9em; }
.held { color: #1a7f37; } .not-held { color: #b42318; } .not-measured { color: #777; }
"""


def _status_class(text: str) -> str:
    for word, css in (("not held", "not-held"), ("not measured", "not-measured"),
                      ("held", "held")):
        if text.startswith(word):
            return css
    return ""


def to_html(doc: Document) -> str:
    """One HTML file with every figure inside it."""
    e = html.escape
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
           f"<title>{e(doc.title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{e(doc.title)}</h1>"]
    for b in doc.blocks:
        if isinstance(b, Heading):
            anchor = "".join(ch if ch.isalnum() else "-" for ch in b.text.lower())
            out.append(f"<h{b.level} id='{anchor}'>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            out.append(f"<p>{e(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            out.append("<table>")
            if b.caption:
                out.append(f"<caption>{e(b.caption)}</caption>")
            out.append("<tr>" + "".join(f"<th>{e(c)}</th>" for c in b.columns) + "</tr>")
            for row in b.rows:
                tds = []
                for c in map(_cell, row):
                    cls = "differs" if c.differs else _status_class(c.text)
                    attr = f" class='{cls}'" if cls else ""
                    mark = e(DIFF_MARK) if c.differs else ""
                    tds.append(f"<td{attr}>{e(c.text)}{mark}</td>")
                out.append("<tr>" + "".join(tds) + "</tr>")
            out.append("</table>")
        elif isinstance(b, Image):
            data = base64.b64encode(Path(b.path).read_bytes()).decode()
            out.append(f"<figure><img alt='{e(b.caption)}' src='data:image/png;base64,{data}'>"
                       f"<figcaption>{e(b.caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
