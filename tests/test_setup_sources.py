"""scripts/pip_sources.py: uv is given exactly the package sources pip is configured with.

A source that uv misses is not a slower install but a different one: torch from PyPI is a
CUDA build of several GB, where pip takes the CPU wheel in a local folder."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pip_sources.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pip_sources", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_source_pip_lists_reaches_uv_once_with_pips_best_match_rule() -> None:
    lines = [
        ":env:.find-links='/opt/wheels'",
        ":env:.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.find-links='/opt/wheels'",  # the same folder from a file: given once
        "site.index-url='https://mirror.example/simple'",
        "user.timeout='60'",
    ]
    args = _load().uv_arguments(lines)
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = list(zip(args[2::2], args[3::2], strict=True))
    assert pairs == [
        ("--find-links", "/opt/wheels"),
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
        ("--extra-index-url", "file:///opt/pypi/simple"),
        ("--extra-index-url", "file:///opt/pypi-more/simple"),
        ("--index-url", "https://mirror.example/simple"),
    ]


def test_values_are_read_as_pip_prints_them_and_no_index_is_kept() -> None:
    module = _load()
    # pip prints repr(value): a newline-separated list arrives escaped on one line
    args = module.uv_arguments(["global.find-links='/a\\n/b'", "global.no-index='true'",
                                "global.no-index='false'", "not a config line"])
    assert args[2:] == ["--find-links", "/a", "--find-links", "/b", "--no-index"]
    assert module.uv_arguments([]) == ["--index-strategy", "unsafe-best-match"]


def test_the_script_prints_nul_separated_arguments_for_this_pip() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         check=True).stdout
    assert out.endswith("\0")
    args = out.split("\0")[:-1]
    assert args[:2] == ["--index-strategy", "unsafe-best-match"]
    assert len(args) % 2 == 0 or "--no-index" in args
