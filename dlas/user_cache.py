"""Where dlas keeps what belongs to this user and machine rather than to a workspace
(compiled probes, the drift record): `$XDG_CACHE_HOME/dlas`, else `~/.cache/dlas`."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dlas"
