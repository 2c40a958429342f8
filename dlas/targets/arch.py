"""CPU architectures: which one a TVM target's code is for, and whether it runs here.

A target's host code is for the architecture of its LLVM `mtriple` (the `host` of a CUDA
target), or this machine's when it names none. Code for another architecture compiles
here (LLVM has every backend) but is neither loadable nor linkable here: no cross linker
is assumed, so such libraries are exported as a `.tar` of object files, which TVM's RPC
server links on the board (`tvm.rpc.server.load_module`; the board needs a C compiler,
as in TVM's cross-compilation tutorial).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

#: The CPU architectures the `llvm` target option knows, with their LLVM triples.
TRIPLES = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}

_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}

#: Exported library suffix: a shared object this machine links, or objects a board links.
NATIVE_SUFFIX, CROSS_SUFFIX = ".so", ".tar"


def normalize_arch(name: str) -> str:
    name = name.strip().lower()
    return _ALIASES.get(name, name)


def machine_arch() -> str:
    """This machine's CPU architecture (x86_64, aarch64, ...)."""
    return normalize_arch(platform.machine())


def _as_dict(target: Any) -> dict[str, Any]:
    if isinstance(target, Mapping):  # a dict, or the FFI Map of an exported Target
        return dict(target)
    export = getattr(target, "export", None)  # tvm.target.Target
    return dict(export()) if export is not None else {}


def target_arch(target: Any) -> str:
    """The CPU architecture a target's host code is for (a JSON dict or a tvm Target)."""
    spec = _as_dict(target)
    if spec.get("kind") != "llvm" and spec.get("host") is not None:
        spec = _as_dict(spec["host"])
    triple = str(spec.get("mtriple") or "")
    return normalize_arch(triple.split("-")[0]) if triple else machine_arch()


def runs_here(target: Any) -> bool:
    return target_arch(target) == machine_arch()


def export_suffix(target: Any) -> str:
    """`.so` for code this machine can link, `.tar` of objects for another architecture."""
    return NATIVE_SUFFIX if runs_here(target) else CROSS_SUFFIX
