"""The site-packages folders a sweep imports from: what set-up byte-compiles.

Why: the package is installed without byte-compiling (pip and uv do it on one core), and
`scripts/setup.sh` compiles on every core instead. Compiling all of site-packages (11,557
files) took 18.8 s of a 2-vCPU Zen 4's set-up; the quickstart's processes import 5,003 of
them, from 666 folders holding 6,100 (635 folders since the TorchScript exporter makes
the ONNX export and a short tuning session no longer trains XGBoost; 596 holding 5,321 since
the digits are read and split without scikit-learn, 2026-12-01). Compiling those folders
took about half the time.
A module outside them is compiled when first imported (and written, unless
PYTHONDONTWRITEBYTECODE says not to); `setup.sh tests` compiles everything for the suite.

The list (`sweep_imports.txt`, folders relative to site-packages) is measured, not
guessed: `--write` runs the quickstart with Python writing every process's bytecode under
a private prefix (PYTHONPYCACHEPREFIX) and keeps the folders it wrote into. Run it again
when the pins in pyproject.toml change; a stale list costs time, never correctness
(`tests/test_sweep_imports.py` says when most of it no longer exists).

    python scripts/sweep_imports.py SITE        # byte-compile the listed folders there
    python scripts/sweep_imports.py --write     # measure again (a quickstart, ~3 min)

The compile is done here rather than by `python -m compileall -j 0 -l -i LIST`: given
folders, compileall starts a process pool per folder (666 of them: as slow as compiling
everything), and given files it compiles them on one core.
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

LIST = Path(__file__).with_name("sweep_imports.txt")
HEADER = ("# site-packages folders the quickstart's processes import from: what "
          "scripts/setup.sh byte-compiles\n# (measured by `python scripts/sweep_imports.py "
          "--write`; run it again when the pins change)\n")


def listed() -> list[str]:
    """The list's folders (relative to site-packages); empty when there is no list."""
    if not LIST.is_file():
        return []
    return [line.strip() for line in LIST.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def existing(site: Path) -> list[Path]:
    """The listed folders present under `site`."""
    return [site / rel for rel in listed() if (site / rel).is_dir()]


def compile_folders(folders: list[Path], workers: int | None = None) -> tuple[int, int]:
    """Byte-compile the `.py` files directly in `folders` on every core; (files, failed)."""
    files = [str(f) for folder in folders for f in sorted(folder.glob("*.py"))]
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        done = list(pool.map(_compile_one, files, chunksize=64))
    return len(files), done.count(False)


def _compile_one(path: str) -> bool:
    # quiet=2: a file that is not Python 3 (a template, a vendored relic) is not an error
    return bool(compileall.compile_file(path, quiet=2))


def measure(repo: Path) -> list[str]:
    """Run the quickstart with every process's bytecode written under a private prefix,
    and return the site-packages folders it wrote into."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "pyc"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
        dlas = Path(sys.executable).with_name("dlas")
        subprocess.run([str(dlas), "run", str(repo / "configs" / "quickstart.yaml"),
                        "--workspace", str(Path(tmp) / "ws")], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        root = prefix / site.relative_to(site.anchor)
        return sorted({str(p.parent.relative_to(root)) for p in root.rglob("*.pyc")})


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"]:
        folders = measure(Path(__file__).resolve().parents[1])
        LIST.write_text(HEADER + "".join(f"{f}\n" for f in folders))
        print(f"{len(folders)} folders -> {LIST}")
        return 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folders = existing(Path(argv[0]))
    if not folders:
        print("no listed folder exists there", file=sys.stderr)
        return 1
    compile_folders(folders)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
