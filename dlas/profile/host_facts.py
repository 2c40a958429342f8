"""What the machine's limits need to know of this host, and of the TVM target on it.

Read from /proc/cpuinfo (through `dlas.targets.host.cpuinfo_fields`, the one parser the
host target uses too, so both see the same CPU) and from sysfs:

* the CPU's table entry (`host_features`, `dlas.profile.cpu_table`) and its identity
  (`cpu_identity`): the limits' cache key needs it because the machine fingerprint's
  model name does not tell one generation from another;
* the nominal clocks (`nominal_clocks`), kept as notes: on a VM, /proc/cpuinfo's
  "cpu MHz" is the base clock, well under what the cores run at, so the theoretical peak
  uses a measured clock (`dlas.profile.limit_kernels.measure_clock`);
* the caches: each level's size and whether each core has its own (`read_caches`);
* which of this CPU's instructions the target may use (`target_flags`), and whether the
  target's code runs here at all (`check_runs_here`): limits are measured by running
  kernels on this machine.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dlas.profile.cpu_table import X86_ARCHES, CoreFeatures, core_features
from dlas.targets import host as host_cpu

_SYS_CPU = Path("/sys/devices/system/cpu")


def host_features(target_flags: Iterable[str] | None = None) -> CoreFeatures:
    """This machine's table entry; `target_flags` (when given) drops the ISA extensions
    the target may not use, since the target bounds what TVM's code can reach."""
    fields = host_cpu.cpuinfo_fields()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    if target_flags is not None:
        flags &= set(target_flags)
    return core_features(flags, fields.get("vendor_id", ""),
                         host_cpu.cpuinfo_int(fields, "cpu family"),
                         host_cpu.cpuinfo_int(fields, "model"), platform.machine())


def cpu_identity() -> dict[str, Any]:
    """What tells one CPU generation from another: machine_fingerprint's model name does
    not ("AMD EPYC" on Zen 3, 4 and 5 VMs alike), so cache keys add these."""
    fields = host_cpu.cpuinfo_fields()
    flags = sorted((fields.get("flags") or fields.get("Features") or "").split())
    return {"vendor": fields.get("vendor_id"), "family": fields.get("cpu family"),
            "model": fields.get("model"), "stepping": fields.get("stepping"),
            "flags": " ".join(flags)}


def nominal_clocks() -> dict[str, float]:
    """GHz from /proc/cpuinfo ("cpu MHz") and cpufreq's maximum, where present."""
    clocks: dict[str, float] = {}
    try:
        clocks["cpuinfo"] = float(host_cpu.cpuinfo_fields()["cpu MHz"]) / 1000.0
    except (KeyError, ValueError):
        pass
    max_freq = _SYS_CPU / "cpu0" / "cpufreq" / "cpuinfo_max_freq"
    try:
        clocks["cpufreq_max"] = int(max_freq.read_text().strip()) / 1e6  # kHz -> GHz
    except (OSError, ValueError):
        pass
    return clocks


def parse_cpu_list(text: str) -> set[int]:
    """CPU ids of a sysfs list such as "0-3,8"."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def parse_size(text: str) -> int:
    """Bytes of a sysfs cache size ("48K", "1024K", "32M")."""
    text = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def read_caches(cpu: int = 0) -> tuple[dict[str, int], list[str]]:
    """(bytes per instance, per-core levels) of `cpu`'s data/unified caches, from sysfs.

    A level is per-core when the CPUs sharing it are the core's own SMT siblings.
    """
    base = _SYS_CPU / f"cpu{cpu}"
    try:
        siblings = parse_cpu_list((base / "topology" / "thread_siblings_list").read_text())
    except OSError:
        siblings = {cpu}
    sizes: dict[str, int] = {}
    private: list[str] = []
    for index in sorted((base / "cache").glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = f"L{int((index / 'level').read_text())}"
            sizes[level] = parse_size((index / "size").read_text())
            if parse_cpu_list((index / "shared_cpu_list").read_text()) <= siblings:
                private.append(level)
        except (OSError, ValueError):
            continue
    return sizes, private


def physical_memory_bytes() -> int:
    """DRAM's "capacity": every working set fits, so the roofline's search ends there."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def is_x86_target(target: Any) -> bool:
    """x86 by its triple, or by this machine when the target names none (host targets)."""
    triple = str(target.attrs.get("mtriple", "") or "")
    return triple.startswith(("x86_64", "i686")) or (
        not triple and platform.machine() in X86_ARCHES)


def target_has(target: Any, feature: str) -> bool:
    """Whether LLVM enables `feature` for the target (False for one it does not know)."""
    from tvm.target.codegen import target_has_features

    try:
        return bool(target_has_features(feature, target))
    except Exception:  # noqa: BLE001 - a feature LLVM does not know for this target
        return False


#: (LLVM feature, /proc/cpuinfo flag) pairs that bound the table entry by the target.
_TARGET_FLAGS = (("avx512f", "avx512f"), ("avx2", "avx2"), ("avx", "avx"), ("fma", "fma"),
                 ("avx512vnni", "avx512_vnni"), ("avxvnni", "avx_vnni"))


def target_flags(target: Any) -> list[str] | None:
    """The cpuinfo flags the target may use (None: not x86, nothing to drop)."""
    if not is_x86_target(target):
        return None
    kept = [flag for feature, flag in _TARGET_FLAGS if target_has(target, feature)]
    dropped = {flag for _, flag in _TARGET_FLAGS} - set(kept)
    host = set((host_cpu.cpuinfo_fields().get("flags") or "").split())
    return sorted(host - dropped)


def check_runs_here(target: Any) -> None:
    """Raise ValueError when the target's code would not run on this CPU: limits are
    measured by running kernels here, so an x86 target may only use flags this CPU has."""
    if not is_x86_target(target):
        return
    host = (host_cpu.cpuinfo_fields().get("flags") or "").split()
    mattr = tuple(str(a) for a in target.attrs.get("mattr", None) or ())
    mcpu = str(target.attrs.get("mcpu", "") or "generic")
    missing = [host_cpu.X86_FEATURE_FLAGS[f]
               for f in host_cpu.missing_features(mcpu, host, mattr)]  # as `host` checks
    if missing:
        raise ValueError(f"target {target} uses {missing}, which this CPU lacks: limits are "
                         "measured on the machine itself")

