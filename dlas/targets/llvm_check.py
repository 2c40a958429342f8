"""Is this CPU, feature or GPU arch one LLVM knows? Asked at config load, not at compile.

LLVM does not refuse an unknown `-mcpu` or `-mattr`: it prints an error or warning on
stderr (once per module it compiles), builds for a generic CPU or ignores the feature,
and the run records a row labelled with what the user wrote but compiled for something
else. So every target option checks its CPU parameters here, through LLVM itself, when
the sweep config is parsed (`dlas plan` already fails), and the probes run with stderr
silenced so asking does not print the very noise it prevents.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import sys
from collections.abc import Iterator

#: The LLVM triple of NVIDIA GPUs, whose CPU names are the `sm_XX` archs.
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2 (LLVM and TVM's C++ logging write there, not to
    sys.stderr) for the duration of a probe."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _nearest(value: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(value, valid, n=1, cutoff=0.5)
    return f" Did you mean '{near[0]}'?" if near else ""


@functools.cache
def _valid_cpu(mcpu: str, triple: str) -> bool:
    from tvm.target import codegen

    with _quiet_stderr():
        return bool(codegen.llvm_is_valid_cpu(mcpu, triple))


@functools.cache
def known_cpus(triple: str) -> tuple[str, ...]:
    """Every -mcpu LLVM knows for `triple` (for suggestions)."""
    import tvm
    from tvm.target import codegen

    with _quiet_stderr():
        target = tvm.target.Target({"kind": "llvm", "mtriple": triple})
        return tuple(str(c) for c in codegen.llvm_get_cpu_archlist(target))


def check_mcpu(mcpu: str, triple: str) -> str:
    """`mcpu` if LLVM knows it for `triple`; else a ValueError that names the nearest."""
    if _valid_cpu(mcpu, triple):
        return mcpu
    hint = _nearest(mcpu, list(known_cpus(triple)))
    raise ValueError(f"mcpu '{mcpu}' is not a CPU LLVM knows for {triple} (LLVM would "
                     f"compile for a generic CPU instead).{hint} Leave mcpu out to use the "
                     "default (detected on this machine)")


@functools.cache
def _known_feature(feature: str, triple: str) -> bool:
    """LLVM knows `feature` for `triple` if enabling it shows in the enabled features
    (an unknown one is ignored, with a warning on stderr)."""
    import tvm
    from tvm.target import codegen

    with _quiet_stderr():
        target = tvm.target.Target({"kind": "llvm", "mtriple": triple, "mcpu": "generic",
                                    "mattr": [f"+{feature}"]})
        return feature in {str(f) for f in codegen.llvm_get_cpu_features(target)}


def check_mattr(features: list[str], triple: str) -> list[str]:
    """`features` if each is `+name`/`-name` with a name LLVM knows for `triple`."""
    unsigned = [f for f in features if not f or f[0] not in "+-"]
    if unsigned:
        raise ValueError(f"mattr entries start with + or - (e.g. '+neon'), got {unsigned}")
    unknown = [f for f in features if not _known_feature(f[1:], triple)]
    if unknown:
        raise ValueError(f"mattr {unknown}: not a feature LLVM knows for {triple} (LLVM "
                         "would ignore it); x86_64 names are like '+avx2', '+avx512f', "
                         "aarch64 ones like '+neon', '+dotprod'")
    return features


def check_cuda_arch(arch: str) -> str:
    """`arch` (sm_XX) if LLVM's NVPTX backend knows that GPU architecture."""
    if _valid_cpu(arch, NVPTX_TRIPLE):
        return arch
    raise ValueError(f"GPU arch '{arch}' is not one LLVM's NVPTX backend knows."
                     f"{_nearest(arch, list(known_cpus(NVPTX_TRIPLE)))} Leave arch out to "
                     "use this machine's GPU (or sm_80 without one)")
