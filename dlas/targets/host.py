"""Host CPU detection and the LLVM target for it.

The LLVM `-mcpu` decides which SIMD instructions TVM may emit (AVX-512, VNNI, Neon), so
it is taken from LLVM's own host detection (`target.llvm_get_system_cpu`, the same
logic clang's `-march=native` uses) and checked against LLVM's CPU list; /proc/cpuinfo
flags are the fallback, mapped to the oldest CPU name that has them.

Threads: `num-cores` in the target only informs TVM's compiler (MetaSchedule sizes its
parallel loops by it). The runtime thread pool is separate: it reads TVM_NUM_THREADS
once, when first used, and otherwise uses *half* the logical CPUs on x86 (one thread on
a 2-vCPU VM), so set it explicitly with `dlas.measure.timing.set_num_threads`.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

#: /proc/cpuinfo flag -> LLVM -mcpu, most capable first (used only if LLVM cannot tell).
_X86_BY_FLAG = [
    ("avx512_vnni", "cascadelake"),
    ("avx512f", "skylake-avx512"),
    ("avx2", "haswell"),
    ("avx", "sandybridge"),
]


def _cpuinfo() -> dict[str, str]:
    """The first processor's key/value block of /proc/cpuinfo (plus arm's global keys)."""
    info: dict[str, str] = {}
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return info
    for line in path.read_text(errors="replace").splitlines():
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def allowed_cpus() -> list[int]:
    """CPU ids this process may run on (respects taskset / cgroup affinity).

    Read once per process: the timing worker pins its calling thread to one CPU
    (`dlas.measure.timing.set_num_threads`), and Linux then reports that one CPU for the
    thread, which must not change what a 'host' target or the load probe sees.
    """
    global _ALLOWED
    if _ALLOWED is None:
        try:
            _ALLOWED = sorted(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            _ALLOWED = list(range(os.cpu_count() or 1))
    return list(_ALLOWED)


_ALLOWED: list[int] | None = None


def available_cores() -> int:
    return len(allowed_cpus())


def _llvm_cpu() -> str | None:
    try:
        from tvm.target import codegen

        name = str(codegen.llvm_get_system_cpu())
        triple = str(codegen.llvm_get_system_triple())
        if name and name != "generic" and codegen.llvm_is_valid_cpu(name, triple):
            return name
    except Exception:  # noqa: BLE001 - an LLVM-less TVM build: fall back to the flags
        return None
    return None


def _mcpu_from_flags(arch: str, flags: list[str]) -> str:
    if arch in ("x86_64", "AMD64", "i686"):
        for flag, mcpu in _X86_BY_FLAG:
            if flag in flags:
                return mcpu
        return "x86-64"
    return "generic"


def detect_host_cpu() -> dict:
    """Describe this machine's CPU: model, ISA flags, usable cores, LLVM mcpu, arch."""
    info = _cpuinfo()
    arch = platform.machine()
    model = (
        info.get("model name")
        or info.get("Model")
        or info.get("Hardware")
        or info.get("CPU part")
        or platform.processor()
        or arch
    )
    flags = (info.get("flags") or info.get("Features") or "").split()
    llvm_cpu = _llvm_cpu()
    return {
        "model": model,
        "flags": flags,
        "cores": available_cores(),
        "mcpu": llvm_cpu or _mcpu_from_flags(arch, flags),
        "mcpu_source": "llvm" if llvm_cpu else "cpuinfo",
        "arch": arch,
    }


#: /proc/cpuinfo flags of an x86 int8 dot-product instruction (vpdpbusd) that accumulates
#: u8 x s8 products in int32 directly: AVX512-VNNI, and AVX-VNNI on newer AVX2-only cores.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def is_x86(cpu: dict) -> bool:
    return cpu.get("arch") in ("x86_64", "AMD64", "i686")


def has_vnni(cpu: dict | None = None) -> bool:
    """Whether this (or the described) x86 CPU has a VNNI int8 dot product.

    Without it, x86 int8 kernels multiply u8 x s8 pairs with `pmaddubsw`, whose int16 pair
    sums saturate (ONNX Runtime's fused int8 convs among them; see dlas.compression.int8).
    """
    cpu = detect_host_cpu() if cpu is None else cpu
    return any(flag in cpu.get("flags", ()) for flag in VNNI_FLAGS)


def host_target(num_threads: int | None = None) -> dict:
    """The LLVM JSON target dict for this machine; `num-cores` = num_threads or all cores."""
    cpu = detect_host_cpu()
    cores = int(num_threads) if num_threads else cpu["cores"]
    target: dict = {"kind": "llvm", "mcpu": cpu["mcpu"], "num-cores": cores}
    if cpu["arch"] in ("aarch64", "arm64"):
        target["mtriple"] = "aarch64-linux-gnu"
        if "asimd" in cpu["flags"] or cpu["arch"] == "arm64":
            target["mattr"] = ["+neon"]
    return target
