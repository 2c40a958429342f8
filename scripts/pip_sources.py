"""Print pip's package sources as uv arguments, NUL-separated (for scripts/setup.sh).

Why: setup.sh installs with uv (the same pins, several times faster than pip at unpacking a
hundred wheels), but uv reads none of pip's configuration. A machine whose pip is told to
look in a local folder or mirror (find-links, extra indexes, a constraint file) must give uv
the same sources, or uv would resolve from PyPI alone: slower, and for torch a CUDA build of
several GB where pip takes the CPU wheel on disk. So this reads what `pip config list`
reports (files and PIP_* variables alike) and says it in uv's words; uv is also told to pick
the best match across all indexes, as pip does.

Run with the python whose pip is configured (setup.sh: the interpreter the venv is made
from, since the venv has no pip until uv installs one): `python scripts/pip_sources.py`.
"""

from __future__ import annotations

import ast
import subprocess
import sys

#: pip's option -> uv's flag, for options that list sources (whitespace-separated values).
_LISTS = {"find-links": "--find-links", "extra-index-url": "--extra-index-url",
          "constraint": "--constraint"}
_TRUE = {"1", "true", "yes", "on"}


def uv_arguments(config_lines: list[str]) -> list[str]:
    """uv arguments for `pip config list` lines (`scope.option='value'`)."""
    args: list[str] = ["--index-strategy", "unsafe-best-match"]
    seen: set[tuple[str, str]] = set()
    for line in config_lines:
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        option = key.rsplit(".", 1)[-1]
        try:
            value = str(ast.literal_eval(raw))
        except (ValueError, SyntaxError):
            value = raw.strip("'\"")
        pairs: list[tuple[str, str]] = []
        if option in _LISTS:
            pairs = [(_LISTS[option], item) for item in value.split()]
        elif option == "index-url":
            pairs = [("--index-url", value)]
        elif option == "no-index" and value.lower() in _TRUE:
            pairs = [("--no-index", "")]
        for pair in pairs:
            if pair not in seen:
                seen.add(pair)
                args.extend(p for p in pair if p)
    return args


def main() -> None:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, check=False).stdout
    sys.stdout.write("\0".join(uv_arguments(listed.splitlines())) + "\0")


if __name__ == "__main__":
    main()
