"""YAML whose aliases expand beyond any real file is refused while it is composed.

PyYAML shares an aliased node instead of copying it, so a few lines of nested anchors (a
"billion laughs" file) compose into a tiny graph whose tree has billions of nodes; every
walk after loading expands it. These tests pin that such files, recursive aliases and
over-deep nesting are `ConfigError`s with file:line, in milliseconds and without the
memory an expansion would take, for sweep configs, experiments and the paper's values.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlas.report.experiments import ExperimentError, load_experiment
from dlas.sweep.config import ConfigError, parse_config
from dlas.sweep.grid import expand
from dlas.sweep.yaml_source import MAX_DEPTH, MAX_NODES, StrictLoader, TooLarge, load_yaml

REPO = Path(__file__).resolve().parents[1]
BASE = "name: x\ndatasets: [digits]\nmodels: [resnet18]\n"


def bomb(levels: int = 9, fan: int = 10, key: str = "description") -> str:
    """A sweep whose `key` expands to fan**levels scalars (10**9 by default)."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan)}]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]" for i in range(1, levels)]
    return BASE + "\n".join(lines) + f"\n{key}: *l{levels - 1}\n"


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="s.yaml")
    return str(err.value)


def test_alias_bomb_is_refused_at_the_alias_without_expanding_it() -> None:
    started = time.perf_counter()
    msg = _error(bomb())
    assert time.perf_counter() - started < 1.0  # composing ~100 nodes, nothing expanded
    # l0..l3 are 11,111 nodes; the 9 aliases *l3 in l4 cross the limit at line 8
    assert msg.startswith(f"s.yaml:8: alias *l3 (a copy of 11,111 nodes) brings the "
                          f"document to more than {MAX_NODES:,} nodes once its aliases are "
                          "expanded")
    assert "billion laughs" in msg and "write the values out, or nest fewer aliases" in msg


def test_merge_key_bomb_is_refused() -> None:
    """Merge keys copy the merged mapping's pairs (PyYAML flattens them into a list)."""
    lines = ["m0: &m0 {" + ", ".join(f"k{j}: v" for j in range(10)) + "}"]
    lines += [f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}], own{i}: 1}}"
              for i in range(1, 9)]
    assert _error(BASE + "\n".join(lines) + "\n").startswith(
        "s.yaml:8: alias *m3 (a copy of 21,555 nodes) brings the document to more than")


def test_alias_bomb_is_refused_under_a_memory_limit() -> None:
    """In a process that may allocate only 256 MiB more than it has after importing: an
    expansion of 10**9 nodes (tens of GB) would die with MemoryError instead."""
    script = textwrap.dedent(f"""
        import resource, sys, time
        from dlas import registry
        from dlas.sweep.config import ConfigError, parse_config
        registry.load_plugins()
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
        started = time.perf_counter()
        try:
            parse_config({bomb(levels=10)!r}, source="s.yaml")
        except ConfigError as exc:
            print(f"{{time.perf_counter() - started:.3f}}", exc)
            sys.exit(0)
        sys.exit("accepted")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    seconds, message = result.stdout.split(" ", 1)
    assert float(seconds) < 2.0 and message.startswith("s.yaml:8: alias *l3")


@pytest.mark.parametrize("text, expected", [
    (BASE + "description: &a [x, *a]\n",
     "s.yaml:4: alias *a is inside the node its anchor names (line 4), a recursive "
     "structure"),
    (BASE + "description: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "\n",
     f"s.yaml:4: nested more than {MAX_DEPTH} levels deep"),
    # small once expanded (one node a level), but deeper than any walk should recurse
    (BASE + "l0: &l0 [x]\n" + "".join(f"l{i}: &l{i} [*l{i - 1}]\n" for i in range(1, 80)),
     f"makes the document nest {MAX_DEPTH + 1} levels deep once expanded"),
])
def test_recursive_or_deep_documents_are_errors(text: str, expected: str) -> None:
    assert expected in _error(text)


def test_a_file_large_without_aliases_is_told_so() -> None:
    """Not a bomb, just more than a config could be (a small limit keeps the test fast)."""
    loader = StrictLoader("a: [" + ", ".join(["1"] * 20) + "]\nb: 2\n", max_nodes=10)
    with pytest.raises(TooLarge) as err:
        loader.get_single_node()
    assert err.value.line == 1
    assert err.value.message.startswith("the document has more than 10 nodes here; a real "
                                        "file has hundreds")


def test_anchors_aliases_and_merge_keys_still_work() -> None:
    """What real configs do with anchors: share parameters, merge and override them."""
    text = BASE + textwrap.dedent("""\
        compression:
          - name: weight_pruning
            params: &prune {levels: &levels [0.5, 0.7], max_drop: 0.02}
          - name: channel_pruning
            params: {<<: *prune, max_drop: 0.05}
          - name: channel_pruning_physical
            params: {levels: *levels}
        """)
    points = expand(parse_config(text))
    params = {p.compression.name: p.compression.params for p in points}
    assert params["weight_pruning"].levels == [0.5, 0.7]
    assert params["channel_pruning"].max_drop == 0.05
    assert params["channel_pruning"].levels == [0.5, 0.7]
    assert params["channel_pruning_physical"].levels == [0.5, 0.7]


def test_a_large_wrong_value_is_quoted_short() -> None:
    msg = _error(BASE + "description: [" + ", ".join(["1"] * 5000) + "]\n")
    assert "(got [1, 1, 1, 1, 1, 1, 1, 1, ...])" in msg and len(msg) < 300


def test_every_yaml_file_dlas_reads_has_the_limits(tmp_path: Path) -> None:
    """Experiments and the paper's values are YAML the user edits too."""
    (tmp_path / "boom.yaml").write_text(bomb())
    with pytest.raises(ExperimentError, match=r"boom.yaml:8: alias \*l3 .* more than"):
        load_experiment("boom", tmp_path)
    from dlas.report.paper import _load

    with pytest.raises(ConfigError, match=r"paper.yaml:8: alias \*l3"):
        _load(Path(tmp_path / "boom.yaml").rename(tmp_path / "paper.yaml"))
    data, lines = load_yaml("a: &x [1, 2]\nb: *x\n", "f.yaml")
    assert data == {"a": [1, 2], "b": [1, 2]} and lines[("b",)] == 2
