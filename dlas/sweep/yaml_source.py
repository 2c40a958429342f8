"""Reading a user's YAML file strictly, keeping the line of every key.

PyYAML's `safe_load` keeps the *last* of two equal keys in one mapping, so a value the
user wrote is silently dropped; and it forgets where each key was, so errors could not
point at a line. `StrictLoader` refuses duplicate keys (naming both lines) and
`load_yaml` returns the data together with a map from each key path to its line.

It also refuses documents whose aliases would expand them beyond any real config: PyYAML
shares an aliased node instead of copying it, so anchors nested in anchors ("billion
laughs") compose into a small graph whose *tree* has billions of nodes, and every walk
after composition (the line map, pydantic, an error message's repr) expands it, for
minutes and gigabytes. The loader counts the expanded tree while it composes (an alias
adds the size of the node it names, known once that node is complete), so such a file is
refused at the alias that crosses `MAX_NODES`, before anything expands it; an alias to a
node that contains it (a recursive structure) and nesting deeper than `MAX_DEPTH` (Python
recursion in every walk) are refused the same way.

`read_config_text` turns every way a path can fail to be a text file (missing, a
directory, unreadable, not UTF-8) into a `ConfigError` that says what to do, so the
command line never shows a traceback for a bad argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Loc = tuple[str | int, ...]

#: The most nodes a document may have with every alias expanded (a key, a value and each
#: item count one). Sweep configs and experiments have hundreds; this leaves room for
#: any hand-written file while every walk of the largest accepted one stays under a second.
MAX_NODES = 100_000
#: The deepest nesting a document may have with every alias expanded. Real files nest
#: under 10 levels; the walks after loading recurse once per level (Python's limit is 1000).
MAX_DEPTH = 64


class ConfigError(ValueError):
    """A sweep config that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class DuplicateKey:
    """A key written twice in one YAML mapping: its text and both 1-based lines."""

    key: str
    first_line: int
    line: int
    first_column: int
    column: int

    def first(self) -> str:
        """Where the first copy is: its line, and its column when both share a line."""
        if self.first_line == self.line:
            return f"column {self.first_column} of this line"
        return f"line {self.first_line}"


class TooLarge(yaml.YAMLError):
    """A document too large or too deep once its aliases are expanded (see the module
    docstring): the 1-based line where composing stopped and what to say about it."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


@dataclass(frozen=True)
class _Expanded:
    """A composed node's tree once expanded: its node count and height."""

    nodes: int
    height: int


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader that records every duplicate mapping key instead of keeping the last,
    and refuses a document whose expanded tree is larger than `max_nodes` or deeper than
    `max_depth` (raising `TooLarge` while composing, before anything is constructed).

    Merge keys (`<<: *anchor`) keep YAML's meaning (explicit keys override merged ones):
    only keys written literally in the same mapping are compared. A merge counts the
    merged mapping in full, which bounds what PyYAML's merge flattening copies.
    """

    def __init__(self, stream: str, max_nodes: int = MAX_NODES,
                 max_depth: int = MAX_DEPTH) -> None:
        super().__init__(stream)
        self.duplicates: list[DuplicateKey] = []
        self.max_nodes, self.max_depth = max_nodes, max_depth
        #: Nodes composed so far, each alias counted as a copy of the node it names.
        self.expanded_nodes = 0
        #: The expanded tree of every anchored node composed so far, by id(node).
        self._anchored: dict[int, _Expanded] = {}
        #: Per open collection: the tallest expanded height among its children so far.
        self._open: list[int] = []
        #: The largest alias so far (nodes, anchor, line): named when the limit is crossed.
        self._largest: tuple[int, str, int] | None = None

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        line = event.start_mark.line + 1
        depth = len(self._open)  # collections around this node
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)  # the anchored node, shared
            tree = self._anchored.get(id(node))
            if tree is None:  # its anchor is still open: the alias is inside it
                raise TooLarge(line, f"alias *{event.anchor} is inside the node its anchor "
                               f"names (line {node.start_mark.line + 1}), a recursive "
                               "structure that never ends when expanded: give the value "
                               "without the alias")
            if self._largest is None or tree.nodes > self._largest[0]:
                self._largest = (tree.nodes, str(event.anchor), line)
            self._add(tree, depth, line, f"alias *{event.anchor} (a copy of "
                      f"{tree.nodes:,} nodes)")
            return node
        if depth + 1 > self.max_depth:
            raise TooLarge(line, f"nested more than {self.max_depth} levels deep; a real "
                           "file nests under 10: flatten the structure")
        start = self.expanded_nodes
        self.expanded_nodes += 1
        self._check(line, "this node")
        self._open.append(0)
        try:
            node = super().compose_node(parent, index)
        finally:
            children = self._open.pop()
        tree = _Expanded(self.expanded_nodes - start, children + 1)
        if self._open:
            self._open[-1] = max(self._open[-1], tree.height)
        if event.anchor is not None:
            self._anchored[id(node)] = tree
        return node

    def _add(self, tree: _Expanded, depth: int, line: int, what: str) -> None:
        """Count an alias's copy of `tree`, at `depth` collections deep."""
        if depth + tree.height > self.max_depth:
            raise TooLarge(line, f"{what} makes the document nest {depth + tree.height} "
                           f"levels deep once expanded, more than {self.max_depth}; a "
                           "real file nests under 10: use fewer nested aliases")
        self.expanded_nodes += tree.nodes
        if self._open:
            self._open[-1] = max(self._open[-1], tree.height)
        self._check(line, what)

    def _check(self, line: int, what: str) -> None:
        if self.expanded_nodes <= self.max_nodes:
            return
        limit = f"more than {self.max_nodes:,} nodes"
        if self._largest is None:  # no alias at all: the file itself is that large
            raise TooLarge(line, f"the document has {limit} here; a real file has hundreds: "
                           "check this is the file you meant, or generate fewer values")
        if not what.startswith("alias"):
            nodes, anchor, at = self._largest
            what += f" (the largest alias so far: *{anchor} at line {at}, {nodes:,} nodes)"
        raise TooLarge(line, f"{what} brings the document to {limit} once its aliases are "
                       "expanded: anchors whose values repeat other aliases multiply (a "
                       "'billion laughs' file), and every reader of the file would expand "
                       "them. A real file has hundreds of nodes: write the values out, or "
                       "nest fewer aliases")

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            mark = key_node.start_mark
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it with its line
                continue
            if first is None:
                seen[key] = mark
            else:
                self.duplicates.append(DuplicateKey(str(key), first.line + 1, mark.line + 1,
                                                    first.column + 1, mark.column + 1))
        return super().construct_mapping(node, deep=deep)


def _line_map(node: yaml.Node, loc: Loc = (), out: dict[Loc, int] | None = None) -> dict[Loc, int]:
    """Map every key path in a composed YAML tree to its 1-based line."""
    out = {} if out is None else out
    out.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue  # a complex key: not something a sweep config can contain
            key = key_node.value
            _line_map(value_node, loc + (key,), out)
            out[loc + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, loc + (i,), out)
    return out


def load_yaml(text: str, source: str, what: str = "sweep config") -> tuple[Any, dict[Loc, int]]:
    """The data of one YAML document and the line of every key path in it.

    Raises ConfigError for invalid YAML, for any key written twice in one mapping
    (every duplicate in the file is listed, each with both of its lines), and for a
    document too large or deep once its aliases are expanded (`StrictLoader`). `what` names
    the kind of file in messages (any YAML the user writes can be read this way).
    """
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except TooLarge as exc:
        raise ConfigError(f"{source}:{exc.line}: {exc.message}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ConfigError(f"invalid {what}:\n  " + "\n  ".join(
            f"{source}:{d.line}: key '{d.key}' is written twice in the same mapping "
            f"(first at {d.first()}); YAML would silently keep only the last "
            "value: delete one of them" for d in loader.duplicates))
    return data, _line_map(node) if node is not None else {}


def read_config_text(path: str | Path, what: str = "sweep config") -> str:
    """The text of a config file, or a ConfigError saying why it cannot be one."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{what} not found: {path.resolve()} (check the path; "
                          "configs/ has examples)")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give the path of a {what} file "
                          "(a .yaml file, e.g. configs/quickstart.yaml)")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc}); check its "
                          "permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} "
                          f"at offset {exc.start}); a {what} is a YAML text file: save it "
                          "as UTF-8") from None
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#")
                               for ln in text.splitlines()):
        raise ConfigError(f"{path}: the file is empty; a {what} is a YAML mapping "
                          "(configs/quickstart.yaml is a complete example)")
    return text.removeprefix("\ufeff")
