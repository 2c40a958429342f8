"""Host CPU detection and the LLVM target for it.

The LLVM `-mcpu` decides which SIMD instructions TVM may emit (AVX-512, VNNI, Neon), so
it is taken from LLVM's own host detection (`target.llvm_get_system_cpu`, the same
logic clang's `-march=native` uses) and checked against LLVM's CPU list; /proc/cpuinfo
flags are the fallback, mapped to the oldest CPU name that has them.

LLVM names the CPU from its family and model alone. A hypervisor may hide features the
model has: an AMD EPYC Zen 4 (family 25, model 17) here reported no AVX-512, LLVM still
said `znver4`, and code built for it died of SIGILL. clang's `-march=native` survives
that by also passing the host's feature list; a TVM target gets only `mcpu`. So every
x86 CPU name is checked against /proc/cpuinfo's SIMD flags (`missing_features`) and, when
the machine lacks one the name implies, the newest older CPU of the same line that it
does have is used instead (`runnable_mcpu`; znver4 -> znver3 there).

Threads: `num-cores` in the target only informs TVM's compiler (MetaSchedule sizes its
parallel loops by it). The runtime thread pool is separate: it reads TVM_NUM_THREADS
once, when first used, and otherwise uses *half* the logical CPUs on x86 (one thread on
a 2-vCPU VM), so set it explicitly with `dlas.measure.vm_timing.set_num_threads`.
"""

from __future__ import annotations

import functools
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


#: A file read instead of /proc/cpuinfo (a saved copy of another machine's), or the name
#: of one dlas ships (`SAVED_CPUS`: zen3, zen1, zen4-avx512-hidden). Its flags then pick
#: the LLVM target (`runnable_mcpu` lowers this CPU's name to what they allow), the
#: kernels and block widths, the int8 range and the training precision, so the AVX2
#: paths run on an AVX-512 machine: `DLAS_CPUINFO=zen3 bash scripts/test.sh`. Only code
#: paths follow it; timings stay this machine's.
CPUINFO_ENV = "DLAS_CPUINFO"
#: Saved /proc/cpuinfo blocks of the CPUs CI has met (package data; README.txt there).
SAVED_CPUS = Path(__file__).parent / "cpuinfo"


def saved_cpu_names() -> list[str]:
    return sorted(p.stem for p in SAVED_CPUS.glob("*.txt") if p.stem != "README")


def cpuinfo_override() -> Path | None:
    """The file `DLAS_CPUINFO` names (a path, or a name in `SAVED_CPUS`), None if unset."""
    value = os.environ.get(CPUINFO_ENV)
    if not value:
        return None
    path = Path(value)
    if not path.is_file() and value in saved_cpu_names():
        return SAVED_CPUS / f"{value}.txt"
    return path


def cpuinfo_fields() -> dict[str, str]:
    """The first processor's key/value block of /proc/cpuinfo (plus arm's global keys);
    empty where there is none.

    The one reader of /proc/cpuinfo in dlas: the host target and the profile's CPU table
    and cache keys (`dlas.profile.host_facts`) must see the same CPU, and tests force one
    CPU on both by replacing this function. `DLAS_CPUINFO` (`CPUINFO_ENV`) names a file
    to read instead, in this process and every one it starts (timing workers, compile
    helpers, a Ray cluster it starts; a cluster joined by address keeps its machines'
    own view), so the whole suite can run as another CPU would see it.
    """
    saved, problem = _checked_override()
    if problem:
        raise FileNotFoundError(problem)
    return saved if saved is not None else _read_cpuinfo(Path("/proc/cpuinfo"))


def machine_cpuinfo_fields() -> dict[str, str]:
    """This machine's own /proc/cpuinfo block, whatever `DLAS_CPUINFO` says: what the
    silicon runs. ONNX Runtime and PyTorch pick their kernels by CPUID, so whether their
    int8 kernels saturate follows these flags, not the saved CPU's."""
    return _read_cpuinfo(Path("/proc/cpuinfo"))


def _read_cpuinfo(path: Path) -> dict[str, str]:
    info: dict[str, str] = {}
    if not path.exists():
        return info
    for line in path.read_text(errors="replace").splitlines():
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def cpuinfo_override_problem() -> str | None:
    """What is wrong with `DLAS_CPUINFO`'s file, or None when it is unset or usable: it is
    missing, has no x86 `flags` / Arm `Features` line to pick a target by, or names SIMD
    features this machine lacks (code built for them would die of SIGILL)."""
    return _checked_override()[1]


def _checked_override() -> tuple[dict[str, str] | None, str | None]:
    """`DLAS_CPUINFO`'s fields (None when unset) and what is wrong with them, read once."""
    path = cpuinfo_override()
    if path is None:
        return None, None
    setting = os.environ[CPUINFO_ENV]
    if not path.is_file():
        return None, (f"{CPUINFO_ENV}={setting}: no such file or saved CPU; name a saved "
                      f"copy of a machine's /proc/cpuinfo, one of dlas's "
                      f"({', '.join(saved_cpu_names())}), or unset it")
    saved = _read_cpuinfo(path)
    if not saved.keys() & {"flags", "Features"}:
        return saved, (f"{CPUINFO_ENV}={setting}: no 'flags' (x86) or 'Features' (Arm) "
                       "line, so no target can be chosen from it; name a saved /proc/cpuinfo")
    flags = saved.get("flags", "").split()
    mine = machine_cpuinfo_fields().get("flags", "").split()
    beyond = sorted(set(flags) & set(X86_FEATURE_FLAGS.values()) - set(mine))
    if flags and mine and beyond:
        return saved, (f"{CPUINFO_ENV}={setting}: that CPU has {', '.join(beyond[:4])}, which "
                       "this machine lacks, so code built for it would die of an illegal "
                       "instruction; name a CPU with fewer features than this one, or unset it")
    return saved, None


def cpuinfo_int(fields: dict[str, str], key: str) -> int:
    """An integer field of `cpuinfo_fields` ("cpu family", "model"; decimal or 0x-hex),
    0 where it is missing or not a number (a CPU the table then does not know)."""
    try:
        return int(fields.get(key, "0"), 0)
    except ValueError:
        return 0


def allowed_cpus() -> list[int]:
    """CPU ids this process may run on (respects taskset / cgroup affinity).

    Read once per process: the timing worker pins its calling thread to one CPU
    (`dlas.measure.vm_timing.set_num_threads`), and Linux then reports that one CPU for the
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
            if flag in flags and not missing_features(mcpu, flags):
                return mcpu
        return "x86-64"
    return "generic"


#: LLVM x86 feature -> the /proc/cpuinfo flag that says the CPU (and the hypervisor) has
#: it. Only instructions a compiler emits in numeric code are listed: a missing one of
#: these is a SIGILL in compiled kernels, where a missing `pku` or `rdpid` is not.
X86_FEATURE_FLAGS: dict[str, str] = {
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2",
    "popcnt": "popcnt", "lzcnt": "abm", "bmi": "bmi1", "bmi2": "bmi2", "movbe": "movbe",
    "f16c": "f16c", "fma": "fma", "avx": "avx", "avx2": "avx2",
    "avxvnni": "avx_vnni", "gfni": "gfni", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq",
    "avx512f": "avx512f", "avx512cd": "avx512cd", "avx512bw": "avx512bw",
    "avx512dq": "avx512dq", "avx512vl": "avx512vl", "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avx512ifma": "avx512ifma",
    "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
    "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "amx-tile": "amx_tile", "amx-int8": "amx_int8", "amx-bf16": "amx_bf16",
}

#: x86 CPU lines, newest first: where a CPU name the machine cannot run falls back to.
X86_LINES: tuple[tuple[str, ...], ...] = (
    ("znver5", "znver4", "znver3", "znver2", "znver1"),
    ("graniterapids", "emeraldrapids", "sapphirerapids", "icelake-server", "cooperlake",
     "cascadelake", "skylake-avx512", "skylake", "broadwell", "haswell", "ivybridge",
     "sandybridge"),
    ("arrowlake", "meteorlake", "raptorlake", "alderlake", "tigerlake", "icelake-client",
     "cannonlake", "skylake", "broadwell", "haswell", "ivybridge", "sandybridge"),
)


@functools.cache
def llvm_cpu_features(mcpu: str, mattr: tuple[str, ...] = ()) -> frozenset[str]:
    """The x86 features LLVM enables for `mcpu` with `mattr` (empty without an LLVM TVM)."""
    try:
        import tvm
        from tvm.target import codegen

        spec: dict = {"kind": "llvm", "mcpu": mcpu, "mtriple": "x86_64-linux-gnu"}
        if mattr:
            spec["mattr"] = list(mattr)
        return frozenset(str(f) for f in codegen.llvm_get_cpu_features(tvm.target.Target(spec)))
    except Exception:  # noqa: BLE001 - an LLVM-less TVM, or a name LLVM does not know
        return frozenset()


def missing_features(mcpu: str, flags: list[str] | tuple[str, ...],
                     mattr: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The SIMD features code built for x86 `mcpu` (and `mattr`) may use that a CPU with
    /proc/cpuinfo `flags` lacks (an empty list: its code runs there)."""
    have = set(flags)
    return sorted(f for f in llvm_cpu_features(mcpu, tuple(mattr))
                  if f in X86_FEATURE_FLAGS and X86_FEATURE_FLAGS[f] not in have)


def why_not_runnable_here(mcpu: str, mattr: list[str] | tuple[str, ...] = (),
                          cpu: dict | None = None) -> str | None:
    """Why code built for x86 `mcpu`/`mattr` cannot run on this machine (it would die of
    SIGILL), or None when it can (or this is not an x86 machine)."""
    cpu = detect_host_cpu() if cpu is None else cpu
    if not is_x86(cpu) or not cpu.get("flags"):
        return None
    lacking = missing_features(mcpu, cpu["flags"], mattr)
    if not lacking:
        return None
    return (f"code for mcpu '{mcpu}' may use {', '.join(lacking)}, which this CPU "
            f"({cpu.get('model')}) lacks, so it would die of an illegal instruction; "
            f"leave mcpu out (detected: '{cpu['mcpu']}'), or measure it on a board "
            "through the `remote` target")


def runnable_mcpu(mcpu: str, flags: list[str] | tuple[str, ...]) -> tuple[str, list[str]]:
    """`mcpu` if its code runs on a CPU with `flags`; else the newest CPU of its line
    (`X86_LINES`) whose code does, or the flag-mapped name. Also what `mcpu` lacked."""
    lacking = missing_features(mcpu, flags)
    if not lacking:
        return mcpu, []
    for line in X86_LINES:
        if mcpu in line:
            for older in line[line.index(mcpu) + 1:]:
                if llvm_cpu_features(older) and not missing_features(older, flags):
                    return older, lacking
    return _mcpu_from_flags("x86_64", list(flags)), lacking


def detect_host_cpu() -> dict:
    """Describe this machine's CPU: model, ISA flags, usable cores, LLVM mcpu, arch."""
    info = cpuinfo_fields()
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
    mcpu = llvm_cpu or _mcpu_from_flags(arch, flags)
    source = "llvm" if llvm_cpu else "cpuinfo"
    if llvm_cpu and arch in ("x86_64", "AMD64") and flags:
        mcpu, lacking = runnable_mcpu(llvm_cpu, flags)
        if lacking:  # a hypervisor hid features the model has (see the module doc)
            more = f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""
            source = (f"llvm's {llvm_cpu}, lowered: this CPU lacks "
                      f"{', '.join(lacking[:3])}{more}")
    return {
        "model": model,
        "flags": flags,
        "cores": available_cores(),
        "mcpu": mcpu,
        "mcpu_source": source,
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
