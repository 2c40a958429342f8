"""scripts/sweep_imports.py: set-up byte-compiles the folders a sweep imports from.

The list is measured for the pinned packages; after a pin change it goes stale, which
costs set-up time only. This says when it has, and that the compile it drives writes
bytecode for every Python 3 file of a listed folder and no other."""

from __future__ import annotations

import importlib.util
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_imports.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sweep_imports", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sweep_imports"] = module  # the compile pool's workers find it by name
    spec.loader.exec_module(module)
    return module


def test_the_list_matches_the_installed_packages() -> None:
    """Most listed folders exist here, the heavy imports among them; if not, the pins
    moved: `python scripts/sweep_imports.py --write`."""
    mod = _load()
    site = Path(sysconfig.get_paths()["purelib"])
    listed = mod.listed()
    assert len(listed) > 100
    present = mod.existing(site)
    assert len(present) >= 0.9 * len(listed), (
        f"{len(listed) - len(present)} of {len(listed)} listed folders are not in {site}: "
        "run `python scripts/sweep_imports.py --write` after changing the pins")
    tops = {p.relative_to(site).parts[0] for p in present if p != site}
    assert {"torch", "tvm", "numpy", "onnxruntime", "pytorch_lightning"} <= tops


def test_the_listed_folders_files_are_compiled_and_nothing_below(tmp_path: Path) -> None:
    mod = _load()
    listed = tmp_path / "pkg"
    below = listed / "sub"
    below.mkdir(parents=True)
    (listed / "a.py").write_text("x = 1\n")
    (listed / "b.py").write_text("def f():\n    return 2\n")
    (listed / "old.py").write_text("print 'python 2'\n")  # not Python 3: counted, no error
    (below / "c.py").write_text("y = 3\n")
    files, failed = mod.compile_folders([listed], workers=2)
    assert (files, failed) == (3, 1)
    compiled = sorted(p.name.split(".")[0] for p in (listed / "__pycache__").glob("*.pyc"))
    assert compiled == ["a", "b"]
    assert not (below / "__pycache__").exists()
