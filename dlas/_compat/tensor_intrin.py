"""Register only the tensor intrinsics a target can use, not all of TVM's.

`tvm.s_tir.tensor_intrin`'s package import registers every intrinsic TVM has (CUDA MMA
and WMMA, ROCm, Hexagon, RISC-V, Arm, x86) by parsing hundreds of TVMScript functions,
each through `inspect.stack()`, whose cost grows with the modules loaded: with torch in
the process it took 100-180 s on these 2-core machines, 135 s of it CUDA's. MetaSchedule
imports the package in every `TuneContext`, so the first tuned task of every dlas process
paid it (profiled: 184 of a 206 s tuning of one 4-trial task).

`register_for(target)` installs the package module without running its `__init__` and
imports only the target's own intrinsic modules (x86 for x86 CPUs: VNNI and AVX-512 dot
products; arm_cpu for aarch64; cuda for CUDA). MetaSchedule's later
`import tvm.s_tir.tensor_intrin` then finds it in `sys.modules`; any other submodule can
still be imported by name.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

PACKAGE = "tvm.s_tir.tensor_intrin"


def modules_for(kind: str, arch: str) -> list[str]:
    """The intrinsic modules a target of this kind and CPU architecture can use."""
    if kind == "cuda":
        return ["cuda"]
    if arch.startswith(("aarch64", "arm")):
        return ["arm_cpu"]
    return ["x86"]


def register_for(target: object) -> list[str]:
    """Register the intrinsics `target` (a tvm.target.Target) can use; the modules now
    imported. Does nothing when TVM's package was imported whole already."""
    import platform

    def triple_arch(t: object) -> str:
        try:
            triple = str(t.attrs.get("mtriple", "") or "")  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - no attrs to read: this machine's architecture
            triple = ""
        return triple.split("-")[0] if triple else platform.machine()

    kind = str(getattr(getattr(target, "kind", None), "name", "llvm"))
    wanted = modules_for(kind, triple_arch(target))
    host = getattr(target, "host", None)
    if kind == "cuda" and host is not None:
        wanted += modules_for("llvm", triple_arch(host))
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            return []
        package = types.ModuleType(PACKAGE)
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = PACKAGE
        package.__spec__ = spec
        sys.modules[PACKAGE] = package
        import tvm.s_tir

        tvm.s_tir.tensor_intrin = package  # type: ignore[attr-defined]
    for name in wanted:
        importlib.import_module(f"{PACKAGE}.{name}")
    return wanted
