"""Where dlas's data files are, in a checkout and in an installed wheel alike.

The paper's values and the experiment definitions (`experiments/`) and the starter sweep
configs (`configs/`) live at the repository's top, where users read and edit them. A wheel
cannot reach the repository, so the build copies both into the package as
`dlas/_data/experiments` and `dlas/_data/configs` (`setup.py`'s `build_py`). `data_dir`
finds the copy an installed dlas carries, else the checkout's folder.
"""

from __future__ import annotations

from pathlib import Path

#: The package's own folder, and where a wheel's data files sit inside it.
PACKAGE = Path(__file__).resolve().parent
PACKAGED = PACKAGE / "_data"
#: The checkout's top folder, when dlas runs from one (an editable install).
CHECKOUT = PACKAGE.parent

#: The folders the build copies (and only their YAML files).
DATA_FOLDERS = ("experiments", "configs")

#: The starter config `dlas init` writes.
STARTER = "quickstart.yaml"


def data_dir(name: str) -> Path:
    """`experiments` or `configs`: the installed package's copy, else the checkout's."""
    if name not in DATA_FOLDERS:
        raise ValueError(f"no data folder {name!r}; dlas carries {DATA_FOLDERS}")
    packaged = PACKAGED / name
    return packaged if packaged.is_dir() else CHECKOUT / name


def starter_config() -> Path:
    """The config `dlas init` copies: the quickstart sweep."""
    return data_dir("configs") / STARTER
