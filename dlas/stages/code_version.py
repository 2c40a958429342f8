"""The code a stage's output depends on, as a part of its cache key.

A stored stage output is reused whenever its key matches. Keys used to hash the stage's
inputs and a hand-bumped `version` only, so a workspace that compiled a point before a
kernel's schedule changed kept serving the old library (and its timings) until its cache
was cleared. Each stage now names the dlas code that decides its output (`Stage.code`,
paths under the `dlas` package) and the libraries that do (`Stage.libraries`), and its key
hashes their digest:

- dlas source is hashed as its syntax tree without docstrings, so a comment or a
  docstring edit keeps every cached entry, and a change to what the code does does not;
- a plugin's option (a module outside dlas, chosen on a layer the stage reads) adds its
  own module's digest, so a plugin's new version recompiles its points too;
- a library adds its installed version (TVM's code generator, torch's training).

Digests are computed once per process per stage (tens of files, a fraction of a second).
"""

from __future__ import annotations

import ast
import hashlib
import sys
from functools import cache
from pathlib import Path
from typing import Any

#: The `dlas` package folder: `Stage.code` entries are relative to it.
DLAS_ROOT = Path(__file__).resolve().parent.parent


class CodeDeclarationError(ValueError):
    """A stage names code that does not exist (a renamed or moved module)."""


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def source_digest(path: Path) -> str:
    """What a Python file does, not how it is commented: its syntax tree without
    docstrings (the parser drops comments), hashed."""
    tree = _without_docstrings(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def declared_files(entries: tuple[str, ...]) -> list[Path]:
    """The Python files of `entries`: each a package folder (every file under it) or a
    module (`models/training` or `models.training`), relative to the dlas package."""
    files: set[Path] = set()
    for entry in entries:
        rel = entry.replace(".", "/")
        folder, module = DLAS_ROOT / rel, DLAS_ROOT / f"{rel}.py"
        if folder.is_dir():
            files.update(folder.rglob("*.py"))
        elif module.is_file():
            files.add(module)
        else:
            raise CodeDeclarationError(
                f"code entry '{entry}' is neither a package nor a module under {DLAS_ROOT}; "
                "update the stage's `code` to where that code lives now")
    return sorted(files)


@cache
def code_digest(entries: tuple[str, ...]) -> str:
    """One digest over the declared dlas code (file paths and their syntax trees)."""
    h = hashlib.sha256()
    for path in declared_files(entries):
        h.update(str(path.relative_to(DLAS_ROOT)).encode())
        h.update(source_digest(path).encode())
    return h.hexdigest()[:24]


@cache
def library_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of the distributions that decide an output ('absent' where one
    is not installed: that is a fact of the output too)."""
    from dlas.results.environment import installed_version

    return {name: installed_version(name) or "absent" for name in names}


@cache
def module_digest(module: str) -> str | None:
    """The digest of an imported module's source file (None for an extension module, or
    one not imported)."""
    mod = sys.modules.get(module)
    file = getattr(mod, "__file__", None)
    if not file or not file.endswith(".py"):
        return None  # an extension or a module without a source: its version is the package's
    return source_digest(Path(file))[:24]


def plugin_code(choices: dict[str, Any]) -> dict[str, str]:
    """`{layer: digest}` of each chosen option whose function lives outside dlas (a
    plugin): dlas's own options are covered by the stage's `code`."""
    out = {}
    for layer, choice in sorted(choices.items()):
        module = getattr(choice.option.fn, "__module__", "") or ""
        if module == "dlas" or module.startswith("dlas."):
            continue
        digest = module_digest(module)
        if digest is not None:
            out[layer] = f"{module}:{digest}"
    return out
