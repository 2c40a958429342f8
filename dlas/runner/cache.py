"""A content-addressed artifact cache: one directory per (stage, key).

An entry is written into a temporary directory and renamed into place only when complete,
so an interrupted stage leaves nothing that a later run could mistake for a result.

Every entry also carries `manifest.json`: the size and SHA-256 of each of its files
(`meta.json` included), written with it. `check` compares an entry with its manifest, and
`has` counts only an intact entry as stored, so a file damaged after it was written (a
truncated library, a checkpoint with a zeroed block) is never used: the executor reports
it and computes the entry again. Entries written before manifests existed have none; they
are used as they are, reported as unverified (nothing says they are damaged, and
recomputing a whole workspace for that would cost hours), except that a `meta.json` that
does not parse makes one damaged too. Delete the cache folder to have every entry
rewritten with a manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas.integrity import Damage, Manifest, Verdict

META = "meta.json"
#: The entry's files as written (reserved: a stage cannot write a file of this name).
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class EntryCheck:
    """What `Cache.check` found for one (stage, key)."""

    stage: str
    key: str
    #: A complete entry is stored (intact or not).
    present: bool
    verdict: Verdict = field(default_factory=lambda: Verdict(False))

    @property
    def usable(self) -> bool:
        return self.present and self.verdict.intact

    @property
    def damaged(self) -> bool:
        return self.present and not self.verdict.intact

    @property
    def unverified(self) -> bool:
        """Stored before manifests existed: used, but nothing was checked."""
        return self.usable and not self.verdict.verified

    def describe(self) -> str:
        """'compile d0270d09a2 (model.so: size 100 bytes, written with 80720)'."""
        return f"{self.stage} {self.key[:10]} ({self.verdict.describe()})"


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

    def exists(self, stage: str, key: str) -> bool:
        """A complete entry is stored (published), whether or not it is intact."""
        return (self.path(stage, key) / META).is_file()

    def has(self, stage: str, key: str) -> bool:
        """An intact entry is stored: one that may be used (see `check`)."""
        return self.check(stage, key).usable

    def check(self, stage: str, key: str) -> EntryCheck:
        """The entry compared with its manifest: absent, intact, unverified (written
        before manifests; used), or damaged (a file missing, of another size or another
        content; never to be used)."""
        folder = self.path(stage, key)
        if not self.exists(stage, key):
            return EntryCheck(stage, key, present=False)
        manifest_path = folder / MANIFEST
        if manifest_path.is_file():
            try:
                verdict = Manifest.read(manifest_path).check(folder)
            except (OSError, ValueError) as exc:
                verdict = Verdict(True, (Damage(MANIFEST, str(exc)),))
        else:
            verdict = Verdict(False)
            try:
                json.loads((folder / META).read_text())
            except (OSError, ValueError) as exc:
                verdict = Verdict(False, (Damage(META, f"unreadable ({exc})"),))
        if not verdict.intact and not self.exists(stage, key):
            return EntryCheck(stage, key, present=False)  # discarded while we looked
        return EntryCheck(stage, key, present=True, verdict=verdict)

    def meta(self, stage: str, key: str) -> dict[str, Any]:
        return json.loads((self.path(stage, key) / META).read_text())

    def discard(self, stage: str, key: str) -> bool:
        """Remove an entry so the next run computes it again (e.g. a timing taken on a busy
        machine); moved aside first, so no reader sees half of it. False if absent."""
        final = self.path(stage, key)
        if not self.exists(stage, key):
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
        """Yield a temp dir to fill; on success store `meta` and the manifest of every
        file, and publish atomically.

        `meta` may be updated by the caller inside the block; it is written at the end.
        """
        final = self.path(stage, key)
        tmp = final.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            yield tmp
            if (tmp / MANIFEST).exists():
                raise RuntimeError(f"{stage} wrote a file named {MANIFEST} into its entry; "
                                   "the cache keeps its checksums there: rename the file")
            (tmp / META).write_text(json.dumps(meta, indent=1, default=str))
            Manifest.of_folder(tmp).write(tmp / MANIFEST)
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

    def listed(self, stage: str, key: str) -> bool:
        """Whether the stage's folder has an entry of that key (intact or not)."""
        return key in self._names(stage)

    def has(self, stage: str, key: str) -> bool:
        if key not in self._names(stage):
            return False
        found = self._has.get((stage, key))
        if found is None:
            found = self._has[(stage, key)] = self.cache.has(stage, key)
        return found
