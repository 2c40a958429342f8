"""A stage's cache key carries the code that decides its output (`dlas.stages.code_version`):
a kernel's schedule that changes is never served from an old compile, while a comment or a
docstring edit keeps every cached entry."""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from dlas.stages import ALL, COMPILE, stage_keys
from dlas.stages import code_version as cv
from dlas.stages import keys as keys_mod
from dlas.sweep.config import parse_config
from dlas.sweep.grid import expand

SWEEP = """
name: keys
datasets: [digits]
models: [{name: resnet18, params: {width_multiplier: 0.25}}]
compression: [none]
algorithms: [direct, gemm]
tuning: [none]
targets: [host]
"""

KERNEL = '''
"""A kernel module."""


def schedule(x):
    """Tile by 16."""
    # the SIMD width
    return x * 16
'''


REAL_ROOT = cv.DLAS_ROOT


def _tree(root: Path, kernel: str) -> None:
    """Every stage's declared code as an empty module or package (as in the real tree),
    and `algorithms/kernel.py` holding `kernel`."""
    for stage in ALL:
        for entry in (*stage.code, type(stage).__module__.removeprefix("dlas.")):
            rel = entry.replace(".", "/")
            if (REAL_ROOT / rel).is_dir():
                (root / rel).mkdir(parents=True, exist_ok=True)
                (root / rel / "__init__.py").touch()
            else:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / f"{rel}.py").touch()
    (root / "algorithms" / "kernel.py").write_text(textwrap.dedent(kernel))


@pytest.fixture
def fake_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`dlas` replaced by a two-module tree whose files a test edits."""
    monkeypatch.setattr(cv, "DLAS_ROOT", tmp_path)
    cv.code_digest.cache_clear()
    yield tmp_path
    cv.code_digest.cache_clear()


def _compile_key(root: Path) -> str:
    cv.code_digest.cache_clear()
    return stage_keys(expand(parse_config(SWEEP))[0]).compile


def test_a_docstring_or_comment_edit_keeps_the_key_a_code_change_does_not(fake_root: Path) -> None:
    _tree(fake_root, KERNEL)
    before = _compile_key(fake_root)
    assert _compile_key(fake_root) == before  # deterministic
    _tree(fake_root, KERNEL.replace("Tile by 16.", "Tile by one SIMD register.")
          .replace("# the SIMD width", "# lanes of a zmm register"))
    assert _compile_key(fake_root) == before
    _tree(fake_root, KERNEL.replace("x * 16", "x * 8"))
    assert _compile_key(fake_root) != before


def test_a_new_module_in_a_declared_package_changes_the_key(fake_root: Path) -> None:
    _tree(fake_root, KERNEL)
    before = _compile_key(fake_root)
    (fake_root / "algorithms" / "winograd.py").write_text("def conv(): return 1\n")
    assert _compile_key(fake_root) != before


def test_a_changed_compile_key_changes_the_measure_key_after_it(fake_root: Path) -> None:
    """The measure stage chains the compile key: a recompiled library is re-timed."""
    _tree(fake_root, KERNEL)
    point = expand(parse_config(SWEEP))[0]
    cv.code_digest.cache_clear()
    first = stage_keys(point)
    _tree(fake_root, KERNEL.replace("x * 16", "x * 8"))
    cv.code_digest.cache_clear()
    second = stage_keys(point)
    assert first.import_ == second.import_  # the import stage does not read `algorithms`
    assert first.compile != second.compile and first.measure != second.measure


def test_every_stage_declares_code_that_exists() -> None:
    """A moved module must be re-declared, not silently dropped from the key."""
    for stage in ALL:
        own = type(stage).__module__.removeprefix("dlas.")
        files = cv.declared_files((*stage.code, own))
        assert files, stage.name
        assert all(f.is_file() and f.suffix == ".py" for f in files)
    with pytest.raises(cv.CodeDeclarationError, match="update the stage's `code`"):
        cv.declared_files(("algorithms/winograd_never_written",))


def test_the_compile_key_covers_the_kernels_and_the_search() -> None:
    files = {str(f.relative_to(cv.DLAS_ROOT)) for f in cv.declared_files(COMPILE.code)}
    for needed in ("algorithms/microkernel.py", "algorithms/blocked.py", "compiler/build.py",
                   "tuning/metaschedule/tune.py", "tir/layout.py"):
        assert needed in files
    assert not any(f.startswith("tuning/baselines") for f in files)  # ORT is not compiled


def test_library_versions_are_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    point = expand(parse_config(SWEEP))[0]
    before = stage_keys(point).compile
    view = point.only(COMPILE.reads, reader="test")
    assert keys_mod.stage_code(COMPILE, view)["libraries"]["apache-tvm"].startswith("0.")
    monkeypatch.setattr(keys_mod, "library_versions",
                        lambda names: {n: "99.0" for n in names})
    assert stage_keys(point).compile != before


def _plugin_schedule(x: int) -> int:
    return x


def test_a_plugin_option_adds_its_own_module() -> None:
    """An option outside dlas is covered by its module's digest; dlas's own are not
    listed (the stage's code covers them)."""
    plugin = SimpleNamespace(option=SimpleNamespace(fn=_plugin_schedule))
    builtin = expand(parse_config(SWEEP))[0].choices["algorithms"]
    out = cv.plugin_code({"algorithms": plugin, "tuning": builtin})
    assert list(out) == ["algorithms"]
    assert out["algorithms"].startswith(f"{__name__}:")
    assert cv.plugin_code({"algorithms": builtin}) == {}


def test_source_digest_ignores_layout_not_meaning(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("def f(x):\n    '''doc'''\n    return x + 1\n")
    b.write_text("def f(x):  # a comment\n\n    return (x +\n            1)\n")
    c.write_text("def f(x):\n    return x + 2\n")
    assert cv.source_digest(a) == cv.source_digest(b) != cv.source_digest(c)
