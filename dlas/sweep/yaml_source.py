"""Reading a user's YAML file strictly, keeping the line of every key.

PyYAML's `safe_load` keeps the *last* of two equal keys in one mapping, so a value the
user wrote is silently dropped; and it forgets where each key was, so errors could not
point at a line. `StrictLoader` refuses duplicate keys (naming both lines) and
`load_yaml` returns the data together with a map from each key path to its line.

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


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader that records every duplicate mapping key instead of keeping the last.

    Merge keys (`<<: *anchor`) keep YAML's meaning (explicit keys override merged ones):
    only keys written literally in the same mapping are compared.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[DuplicateKey] = []

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

    Raises ConfigError for invalid YAML and for any key written twice in one mapping
    (every duplicate in the file is listed, each with both of its lines). `what` names
    the kind of file in messages (any YAML the user writes can be read this way).
    """
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
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
