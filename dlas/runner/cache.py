"""A content-addressed artifact cache: one directory per (stage, key).

An entry is written into a temporary directory and renamed into place only when complete,
so an interrupted stage leaves nothing that a later run could mistake for a result.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

META = "meta.json"


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def scratch(self, stage: str, key: str) -> Path:
        """A persistent per-entry work area (e.g. training checkpoints) kept across runs."""
        path = self.root / stage / f"{key}.partial"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def has(self, stage: str, key: str) -> bool:
        return (self.path(stage, key) / META).is_file()

    def meta(self, stage: str, key: str) -> dict[str, Any]:
        return json.loads((self.path(stage, key) / META).read_text())

    def discard(self, stage: str, key: str) -> bool:
        """Remove an entry so the next run computes it again (e.g. a timing taken on a busy
        machine); moved aside first, so no reader sees half of it. False if absent."""
        final = self.path(stage, key)
        if not self.has(stage, key):
            return False
        trash = final.parent / f".discard-{key}-{uuid.uuid4().hex[:8]}"
        try:
            os.replace(final, trash)
        except FileNotFoundError:  # another process discarded it first
            return False
        shutil.rmtree(trash, ignore_errors=True)
        return True

    @contextlib.contextmanager
    def write(self, stage: str, key: str, meta: dict[str, Any]) -> Iterator[Path]:
        """Yield a temp dir to fill; on success store `meta` and publish atomically.

        `meta` may be updated by the caller inside the block; it is written at the end.
        """
        final = self.path(stage, key)
        tmp = final.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            yield tmp
            (tmp / META).write_text(json.dumps(meta, indent=1, default=str))
            if final.exists():  # a concurrent writer won; keep its copy
                shutil.rmtree(tmp)
            else:
                os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        scratch = final.parent / f"{key}.partial"
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)

    def clean_stale(self, is_claimed: Callable[[str, str], bool]) -> int:
        """Remove the half-written `.tmp-*` folders (and `.discard-*` leftovers) that
        killed processes left behind; a `.tmp-*` whose entry is still claimed by a live
        process is that process's work in progress and stays. Returns how many went."""
        removed = 0
        for stage_dir in (p for p in self.root.iterdir() if p.is_dir()):
            for leftover in stage_dir.glob(".tmp-*"):
                key = leftover.name[len(".tmp-"):].rsplit("-", 1)[0]
                if not is_claimed(stage_dir.name, key):
                    shutil.rmtree(leftover, ignore_errors=True)
                    removed += 1
            for leftover in stage_dir.glob(".discard-*"):
                shutil.rmtree(leftover, ignore_errors=True)
                removed += 1
        return removed


class CacheIndex:
    """What a cache holds, for asking about many keys at once (`dlas plan` of a large
    grid): each stage folder is listed once, and only keys that are listed are checked
    for a complete entry (`Cache.has`), instead of a file lookup per key asked about.
    A snapshot: entries written after a stage's folder was listed are not seen."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self._listed: dict[str, frozenset[str]] = {}
        self._has: dict[tuple[str, str], bool] = {}  # keys shared by many points

    def _names(self, stage: str) -> frozenset[str]:
        names = self._listed.get(stage)
        if names is None:
            try:
                found = os.listdir(self.cache.root / stage)
            except (FileNotFoundError, NotADirectoryError):
                found = []
            # the work areas and half-written or discarded entries beside the entries
            names = frozenset(n for n in found if not n.startswith(".")
                              and not n.endswith(".partial"))
            self._listed[stage] = names
        return names

    def any(self, stage: str) -> bool:
        """Whether the stage has any entry at all (else no key needs asking about)."""
        return bool(self._names(stage))

    def has(self, stage: str, key: str) -> bool:
        if key not in self._names(stage):
            return False
        found = self._has.get((stage, key))
        if found is None:
            found = self._has[(stage, key)] = self.cache.has(stage, key)
        return found
