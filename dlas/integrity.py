"""Checksums written with stored files and checked before the files are used.

Files in the stage cache and training checkpoints live for months on disks and shared
file systems; a truncated library or a checkpoint with a zeroed block can still load
(torch does not check the data it unpickles) and would silently become a wrong result.
So each artifact carries, from the moment it is written, the size and SHA-256 of its
files, and readers compare before use:

- a cache entry holds a `Manifest` of all its files (`dlas.runner.cache`);
- a single file (a resume checkpoint) has a *seal* beside it: `NAME.sha256`.

Hashing costs 0.75 ms per MB here (measured on a 50 MB file; hashlib's SHA-256 uses the
CPU's SHA instructions): a few ms per entry, small beside loading the artifact. Files
written before this existed have no manifest or seal: they are reported as unverified
(`Verdict.verified` False) and used, since nothing says they are damaged; the policy is
the caller's.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Read size for hashing: large enough that the Python loop costs nothing.
_CHUNK = 1 << 20
#: Suffix of a single file's seal.
SEAL_SUFFIX = ".sha256"


@dataclass(frozen=True)
class FileDigest:
    """What a file was when it was written."""

    size: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> FileDigest:
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
                size += len(chunk)
        return cls(size, h.hexdigest())

    def as_json(self) -> dict[str, int | str]:
        return {"size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Damage:
    """One file that is not what was written: `problem` says how."""

    file: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: {self.problem}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: `verified` when a manifest or seal existed to check
    against; `damage` lists what differs (empty when intact, or when unverified)."""

    verified: bool
    damage: tuple[Damage, ...] = ()

    @property
    def intact(self) -> bool:
        return not self.damage

    def describe(self) -> str:
        return "; ".join(map(str, self.damage))


def _compare(path: Path, name: str, written: FileDigest) -> Damage | None:
    """How the file at `path` differs from `written`, or None. The size first: a
    truncated file is found without reading it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return Damage(name, "missing")
    if size != written.size:
        return Damage(name, f"size {size} bytes, written with {written.size}")
    if FileDigest.of(path).sha256 != written.sha256:
        return Damage(name, "content differs from what was written (sha256 mismatch, same "
                            "size)")
    return None


def _parse_digest(value: object) -> FileDigest:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object with size and sha256, got {value!r}")
    size, sha = value.get("size"), value.get("sha256")
    if not isinstance(size, int) or not isinstance(sha, str) or len(sha) != 64:
        raise ValueError(f"expected an object with size and sha256, got {value!r}")
    return FileDigest(size, sha)


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so a reader sees the old file or the new one, never half
    (a process killed meanwhile leaves at most a hidden temporary file beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".tmp", delete=False) as tmp:
        try:
            tmp.write(text)
        except BaseException:
            tmp.close()
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, path)


@dataclass(frozen=True)
class Manifest:
    """Size and SHA-256 of every file in a folder (paths relative to it, '/'-separated)."""

    files: dict[str, FileDigest]

    @classmethod
    def of_folder(cls, folder: Path) -> Manifest:
        return cls({path.relative_to(folder).as_posix(): FileDigest.of(path)
                    for path in sorted(p for p in folder.rglob("*") if p.is_file())})

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"files": {n: d.as_json() for n, d in self.files.items()}},
                                   indent=1))

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """The manifest stored at `path`; ValueError if it cannot be parsed (itself
        damaged), OSError if it cannot be read."""
        try:
            data = json.loads(path.read_text())
            files = data["files"]
            if not isinstance(files, dict):
                raise ValueError(f"'files' is {type(files).__name__}, not an object")
            return cls({str(n): _parse_digest(d) for n, d in files.items()})
        except (ValueError, KeyError, TypeError) as exc:  # JSON and decoding errors too
            raise ValueError(f"unreadable ({type(exc).__name__}: {exc})") from exc

    def check(self, folder: Path) -> Verdict:
        """Every listed file compared with what was written (files added later are not
        the record's and are not checked)."""
        damage = [d for name, written in self.files.items()
                  if (d := _compare(folder / name, name, written)) is not None]
        return Verdict(True, tuple(damage))


def seal_path(path: Path) -> Path:
    return path.with_name(path.name + SEAL_SUFFIX)


def write_seal(path: Path, *, for_name: Path | None = None) -> None:
    """Write the digest of the file at `path` as the seal of `for_name` (default: `path`
    itself), atomically; lets a writer seal a temporary file under its final name."""
    digest = FileDigest.of(path)
    write_atomically(seal_path(for_name or path), json.dumps(digest.as_json()))


def check_seal(path: Path) -> Verdict:
    """`path` against its seal; unverified (and intact) when it has none."""
    seal = seal_path(path)
    if not seal.is_file():
        return Verdict(False)
    try:
        written = _parse_digest(json.loads(seal.read_text()))
    except (OSError, ValueError) as exc:  # JSON and decoding errors are ValueErrors
        return Verdict(True, (Damage(seal.name, f"unreadable ({exc})"),))
    damage = _compare(path, path.name, written)
    return Verdict(True, (damage,) if damage else ())


def remove_sealed(path: Path) -> None:
    """Delete a file and its seal (either may be absent)."""
    for p in (path, seal_path(path)):
        p.unlink(missing_ok=True)
