"""Packaging beyond pyproject.toml: the wheel carries `experiments/` and `configs/`.

Both stay at the repository's top (users edit configs there; the experiments are read
beside the docs), so the build copies their YAML files into the package as
`dlas/_data/{experiments,configs}`, where `dlas.resources.data_dir` finds them in an
installed wheel. MANIFEST.in puts them in the sdist, so a wheel built from it has them too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA_FOLDERS = ("experiments", "configs")  # as dlas.resources.DATA_FOLDERS


class BuildPyWithData(build_py):
    """build_py, then the data folders' YAML files into build_lib/dlas/_data."""

    def run(self) -> None:
        super().run()
        for name in DATA_FOLDERS:
            source = HERE / name
            target = Path(self.build_lib) / "dlas" / "_data" / name
            target.mkdir(parents=True, exist_ok=True)
            for path in sorted(source.glob("*.yaml")):
                shutil.copy2(path, target / path.name)


setup(cmdclass={"build_py": BuildPyWithData})
