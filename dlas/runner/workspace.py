"""A sweep's workspace and what a run of it reports: the records every executor, the
console and the commands share, in a module of their own so that none of them imports
another to name them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dlas.results.row import ResultRow
from dlas.stages.chains import STAGES


@dataclass
class StageTally:
    """What the executor did, per stage: entries computed here (by this process or its
    compile helpers), entries reused (from the cache, or computed meanwhile by another
    process), seconds spent computing (summed over processes, so more than the wall time
    where helpers ran beside it), and entries found damaged (then computed again, so also
    counted as computed)."""

    computed: Counter[str] = field(default_factory=Counter)
    reused: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    damaged: Counter[str] = field(default_factory=Counter)



@dataclass
class RunReport(StageTally):
    points: int = 0
    ok: int = 0
    failed: int = 0
    verification_failed: int = 0
    not_runnable: int = 0
    skipped_failed: int = 0
    interrupted: bool = False
    wall_seconds: float = 0.0
    rows: list[ResultRow] = field(default_factory=list)

    @property
    def recomputed_nothing(self) -> bool:
        return not any(self.computed[s] for s in STAGES if s != "data")


@dataclass
class Workspace:
    """Where a sweep's cache and results live (default: ./dlas-workspace)."""

    root: Path
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.cache_dir = Path(self.cache_dir) if self.cache_dir else self.root / "cache"

    @property
    def db_path(self) -> Path:
        return self.root / "results.db"
