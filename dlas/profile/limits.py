"""The machine's measured limits: peak FLOP/s and bandwidth per memory level.

Why measured, and with TVM: a roofline judges each layer against what this machine can do
for code TVM and LLVM generate for this target, on the threads and CPUs the layers were
timed with. Datasheet numbers are not enough on the cloud VMs dlas runs on: the CPU model
reads "AMD EPYC" whatever the generation, and /proc/cpuinfo's "cpu MHz" is the nominal
clock (2.6 GHz on a Zen 5 VM that runs its FMAs at 4.5 GHz). So every figure here comes
from a kernel compiled by `tvm.compile` for the target and timed with TVM's time
evaluator (the minimum over `REPEATS` repeats of at least `MIN_REPEAT_MS` each):

* **Compute peak** (`peak_gflops`): `FMA_CHAINS` independent vector accumulators per
  thread, held in registers, each updated `acc = acc * a + b` (LLVM contracts it to one
  FMA) `FMA_ITERS` times; a parallel outer loop gives each thread its own accumulators; no
  memory traffic inside the loop. 2 FLOPs per FMA per lane. The output is checked exactly
  (a = 1, b = 2^-8 keeps every partial sum exact in float32), so LLVM cannot drop work.
* **int8 peak** (`peak_gflops["int8"]`, in GOP/s, 2 ops per multiply-accumulate): only on
  targets with AVX512-VNNI, the same kernel shape with `vpdpbusd` (64 u8 x s8 MACs into 16
  int32 lanes per instruction) called through `T.call_llvm_pure_intrin`, checked exactly.
  Left out elsewhere: TVM 0.27 has no AVX2 int8 intrinsic, and an auto-vectorised
  `pmaddubsw` chain is not a peak anyone's int8 kernel reaches (see DESIGN.md). The
  operands are `<64 x i8>` vectors, the intrinsic's signature in the LLVM TVM 0.27 ships
  (22); an LLVM that wants `<16 x i32>` fails to compile it and int8 is left out, noted.
* **Clock**: a dependent chain of `x = (x ^ a) + b` on every thread (two 1-cycle integer
  ops per iteration, which nothing can overlap), so cycles = 2 x iterations. It sets the
  frequency of the theoretical peak; /proc/cpuinfo and cpufreq are kept as notes.
* **Bandwidth** (`bandwidth_gbs`): STREAM's triad `a[i] = b[i] + s * c[i]`, vectorised,
  each thread on its own contiguous third of the arrays, at one working set per level
  (`working_sets`). Bytes counted as STREAM does: 3 x 4 bytes per float32 element (read
  b, read c, write a); the write-allocate read of `a` is *not* counted, so where stores
  miss the cache (L3, DRAM) the bus moves up to 4/3 of the counted bytes.

Theoretical peak: cores x fp32 lanes per FMA pipe x FMA pipes x 2 x GHz, from a per-CPU
table (`core_features`) that tests drive with forced flags, so every path is covered
whichever CPU the suite runs on.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

#: Memory levels, smallest first, as `bandwidth_gbs` and `level_bytes` key them.
LEVELS = ("L1", "L2", "L3", "DRAM")
#: Bump when a kernel or a sizing rule changes: cached limits of another method are stale.
METHOD_VERSION = 1

#: Independent accumulators per thread. FMA latency (4-5 cycles) x 2 pipes needs at least
#: 10; 12 + the two broadcast operands still fit AVX2's 16 vector registers.
FMA_CHAINS = 12
#: VNNI accumulators (AVX-512 only: 32 registers; vpdpbusd latency up to 5 x 2 pipes).
INT8_CHAINS = 16
#: Loop iterations of one call of the compute kernels and of the clock chain: a few ms per
#: call, so the parallel launch (a few us) is noise.
FMA_ITERS = 1 << 22
CLOCK_ITERS = 1 << 22
#: Integer ops on the clock chain's critical path per iteration (xor, add: 1 cycle each).
CLOCK_CYCLES_PER_ITER = 2
#: Clocks outside this range mean the probe was fooled (or descheduled): not used.
PLAUSIBLE_GHZ = (0.3, 7.0)
#: Threads run in parallel when the clock with all of them running is at least this share
#: of one thread's; far below it, two threads share one CPU (a hypervisor state).
PARALLEL_MIN_RATIO = 0.8
#: Waits for the threads to run in parallel before measuring anyway, and the wait (s).
PARALLEL_TRIES = 3
PARALLEL_WAIT_S = 1.0
#: Time evaluator: min over REPEATS repeats, each at least MIN_REPEAT_MS of calls.
REPEATS = 3
MIN_REPEAT_MS = 50
#: Triad bytes per call for cache levels (passes over the working set in one call), so a
#: call lasts well over the parallel launch's cost even for an L1-sized working set.
TRIAD_CALL_BYTES = 256 << 20
#: The DRAM working set: 4 x the L3 capacity, and at least this.
DRAM_MIN_BYTES = 256 << 20
#: Bytes per element of a float32 triad (read b, read c, write a).
TRIAD_BYTES_PER_ELEMENT = 12
#: Measured peak above theoretical x this is reported in `notes`.
THEORETICAL_SLACK = 1.1
#: Cache sizes used where sysfs has none (and said so in notes).
DEFAULT_LEVEL_BYTES = {"L1": 32 << 10, "L2": 512 << 10, "L3": 8 << 20}

_X86 = ("x86_64", "AMD64", "i686")
_SYS_CPU = Path("/sys/devices/system/cpu")


class MachineLimits(BaseModel):
    """What this machine attains for TVM-generated code on `threads` threads."""

    #: The target (JSON dict) the kernels were compiled for.
    tvm_target: dict[str, Any]
    threads: int
    #: CPUs the threads were pinned to (TVM's task 0, the calling thread, on the first);
    #: empty when the threads floated.
    cpus: list[int]
    #: Measured GFLOP/s per dtype ("int8": GOP/s, 2 per multiply-accumulate).
    peak_gflops: dict[str, float]
    #: The CPU table's bound at the measured clock, and how it was computed.
    theoretical_gflops: dict[str, float]
    theoretical_basis: str
    #: Clocks in GHz by source: "measured" (the dependent chain), "cpuinfo" ("cpu MHz"),
    #: "cpufreq_max" (/sys, absent on most VMs).
    clock_ghz: dict[str, float] = Field(default_factory=dict)
    #: Triad GB/s per memory level (all threads together).
    bandwidth_gbs: dict[str, float]
    #: Working set (bytes, all threads) each level's bandwidth was measured at.
    bandwidth_bytes: dict[str, int] = Field(default_factory=dict)
    #: Capacity of one instance of each level (sysfs); DRAM: physical memory.
    level_bytes: dict[str, int]
    #: Levels each core has its own instance of: a working set of `threads` threads may
    #: use `threads` x its capacity (`dlas.profile.roofline.level_capacity`).
    private_levels: list[str] = Field(default_factory=lambda: ["L1", "L2"])
    #: Placement of the threads' CPUs while measuring (`dlas.measure.placement`: "single",
    #: "near", "far", ...): multi-thread limits compare only with timings taken in it.
    placement: str = "unknown"
    #: Unix time of the measurement, and how long it took (s).
    measured_at: float
    seconds: float
    #: `dlas.results.environment.machine_fingerprint()`.
    machine: dict[str, Any]
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------
# The CPU table: per-core SIMD resources, by vendor / family / model / flags.


@dataclass(frozen=True)
class CoreFeatures:
    """One core's FMA resources: what the theoretical peak multiplies.

    `datapath_bits` is the width of one FMA pipe, which is not the register width: Zen 4
    runs a 512-bit FMA as two halves on 256-bit pipes, so it does as many fp32 FLOPs per
    cycle as Zen 3's AVX2, while Zen 5 (server and desktop) has 512-bit pipes.
    """

    #: The CPU generation as the table named it ("AMD Zen 4 (family 25)").
    name: str
    #: The widest vector ISA ("AVX-512", "AVX2", "AVX", "SSE2", "Neon", "scalar").
    isa: str
    datapath_bits: int
    #: Pipes that each start one FMA (or, without FMA, one of the mul/add pair) a cycle.
    fma_units: int
    #: Whether FMA instructions exist; without them a mul pipe and an add pipe give the
    #: same 2 FLOPs per lane per cycle, which is how the table counts them.
    fused: bool
    #: Whether an int8 dot product (VNNI vpdpbusd) runs on the same pipes.
    vnni: bool
    #: Whether the table knows this CPU or fell back on an assumption (said in basis).
    assumed: bool = False

    @property
    def fp32_lanes(self) -> int:
        return max(self.datapath_bits // 32, 1)

    def ops_per_cycle(self, dtype: str) -> float | None:
        """FLOPs (int8: ops) one core can start per cycle, or None if not in the table.

        int8 via VNNI: 4 bytes per fp32 lane, so 4 x the fp32 rate on the same pipes.
        """
        if dtype == "float32":
            return float(self.fp32_lanes * self.fma_units * 2)
        if dtype == "int8" and self.vnni:
            return float(self.datapath_bits // 8 * self.fma_units * 2)
        return None


#: AMD Zen 5 models with 256-bit FMA pipes (mobile: Strix Point 0x20-0x2F, Krackan and
#: Strix Halo 0x60-0x7F; public reviews). Server (Turin) and desktop have 512-bit pipes.
_ZEN5_256BIT_MODELS = (range(0x20, 0x30), range(0x60, 0x80))
#: Intel AVX-512 cores with one 512-bit FMA (ports 0+1 fused): client Ice Lake (0x7D,
#: 0x7E), Tiger Lake (0x8C, 0x8D), Rocket Lake (0xA7). Xeon Silver/Bronze also have one,
#: which flags cannot tell from Gold/Platinum: those are assumed to have two.
_INTEL_ONE_512_FMA_MODELS = frozenset({0x7D, 0x7E, 0x8C, 0x8D, 0xA7})


def _x86_isa(flags: frozenset[str]) -> tuple[str, int]:
    if "avx512f" in flags:
        return "AVX-512", 512
    if "avx2" in flags:
        return "AVX2", 256
    if "avx" in flags:
        return "AVX", 256
    return "SSE2", 128


def _amd_pipes(family: int, model: int, isa_bits: int) -> tuple[str, int, int, bool]:
    """(name, FMA pipe bits, pipes, assumed) of an AMD core."""
    if family == 23:
        if model < 0x30:
            return f"AMD Zen/Zen+ (family 23, model {model:#x})", 128, 2, False
        return f"AMD Zen 2 (family 23, model {model:#x})", 256, 2, False
    if family == 25:
        if isa_bits >= 512:
            return f"AMD Zen 4 (family 25, model {model:#x})", 256, 2, False
        return f"AMD Zen 3 (family 25, model {model:#x})", 256, 2, False
    if family == 26:
        bits = 256 if any(model in r for r in _ZEN5_256BIT_MODELS) else 512
        return f"AMD Zen 5 (family 26, model {model:#x})", bits, 2, False
    if family > 26:
        return f"AMD family {family} (assumed like Zen 5)", min(isa_bits, 512), 2, True
    return f"AMD family {family} (not in the table)", min(isa_bits, 128), 1, True


def _intel_pipes(family: int, model: int, isa: str, isa_bits: int) -> tuple[str, int, int, bool]:
    """(name, FMA pipe bits, pipes, assumed) of an Intel core."""
    if isa == "AVX-512":
        units = 1 if model in _INTEL_ONE_512_FMA_MODELS else 2
        return f"Intel AVX-512 (family {family}, model {model:#x})", 512, units, units == 2
    if isa == "AVX2":
        return f"Intel AVX2 (family {family}, model {model:#x})", 256, 2, False
    return f"Intel {isa} (family {family}, model {model:#x})", isa_bits, 1, False


def _x86_features(flags: frozenset[str], vendor: str, family: int, model: int) -> CoreFeatures:
    isa, isa_bits = _x86_isa(flags)
    fused = "fma" in flags or "avx512f" in flags
    if vendor == "AuthenticAMD":
        name, bits, units, assumed = _amd_pipes(family, model, isa_bits)
    elif vendor == "GenuineIntel":
        name, bits, units, assumed = _intel_pipes(family, model, isa, isa_bits)
    else:
        name, bits, units, assumed = f"{vendor or 'x86'} {isa} (assumed)", isa_bits, 2, True
    if not fused:
        units = 1  # one mul pipe + one add pipe: counted as 1 x 2 FLOPs per lane
    vnni = "avx512_vnni" in flags or "avx_vnni" in flags
    return CoreFeatures(name, isa, min(bits, isa_bits), units, fused, vnni, assumed)


def core_features(flags: Iterable[str], vendor: str = "", family: int = 0, model: int = 0,
                  arch: str = "x86_64") -> CoreFeatures:
    """The table's entry for a core with these /proc/cpuinfo flags and CPUID identity.

    Every argument is explicit so tests can force any CPU (AVX2 Zen 3, AVX-512 Zen 4,
    Zen 5, Intel) whatever machine runs them. AArch64 is assumed to have two 128-bit Neon
    FMA pipes (Cortex-A76 and newer, Neoverse N1/V1); older cores have fewer.
    """
    flagset = frozenset(flags)
    if arch in _X86:
        return _x86_features(flagset, vendor, family, model)
    if arch in ("aarch64", "arm64"):
        vnni = "asimddp" in flagset
        return CoreFeatures("AArch64 (assumed 2 x 128-bit FMA pipes)", "Neon", 128, 2, True,
                            vnni, assumed=True)
    return CoreFeatures(f"{arch} (not in the table)", "scalar", 32, 1, True, False, True)


def theoretical_peak(features: CoreFeatures, cores: int, ghz: float,
                     clock_source: str = "") -> tuple[dict[str, float], str]:
    """Peak GFLOP/s per dtype of `cores` such cores at `ghz`, and how it was computed."""
    peaks: dict[str, float] = {}
    for dtype in ("float32", "int8"):
        per_cycle = features.ops_per_cycle(dtype)
        if per_cycle is not None:
            peaks[dtype] = cores * per_cycle * ghz
    pipes = "FMA units" if features.fused else "mul+add pipe pairs"
    clock = f"{ghz:.2f} GHz" + (f" ({clock_source})" if clock_source else "")
    basis = (f"{cores} core{'s' if cores != 1 else ''} x {features.fp32_lanes} fp32 lanes "
             f"({features.isa}, {features.datapath_bits}-bit datapath) x "
             f"{features.fma_units} {pipes} x 2 x {clock}; {features.name}")
    if "int8" in peaks:
        basis += (f"; int8: {features.datapath_bits // 8} lanes x {features.fma_units} x 2 "
                  "(VNNI on the same pipes)")
    if features.assumed:
        basis += "; pipes assumed, CPU not in the table"
    return peaks, basis


# --------------------------------------------------------------------------------------
# Host facts: identity, nominal clocks, caches.


def cpuinfo_fields() -> dict[str, str]:
    """The first processor's /proc/cpuinfo block (empty where there is none)."""
    path = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    if not path.exists():
        return fields
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _int_field(fields: dict[str, str], key: str) -> int:
    try:
        return int(fields.get(key, "0"), 0)
    except ValueError:
        return 0


def host_features(target_flags: Iterable[str] | None = None) -> CoreFeatures:
    """This machine's table entry; `target_flags` (when given) drops the ISA extensions
    the target may not use, since the target bounds what TVM's code can reach."""
    fields = cpuinfo_fields()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    if target_flags is not None:
        flags &= set(target_flags)
    return core_features(flags, fields.get("vendor_id", ""), _int_field(fields, "cpu family"),
                         _int_field(fields, "model"), platform.machine())


def cpu_identity() -> dict[str, Any]:
    """What tells one CPU generation from another: machine_fingerprint's model name does
    not ("AMD EPYC" on Zen 3, 4 and 5 VMs alike), so cache keys add these."""
    fields = cpuinfo_fields()
    flags = sorted((fields.get("flags") or fields.get("Features") or "").split())
    return {"vendor": fields.get("vendor_id"), "family": fields.get("cpu family"),
            "model": fields.get("model"), "stepping": fields.get("stepping"),
            "flags": " ".join(flags)}


def nominal_clocks() -> dict[str, float]:
    """GHz from /proc/cpuinfo ("cpu MHz") and cpufreq's maximum, where present."""
    clocks: dict[str, float] = {}
    try:
        clocks["cpuinfo"] = float(cpuinfo_fields()["cpu MHz"]) / 1000.0
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


def level_sizes(cpu: int, notes: list[str]) -> tuple[dict[str, int], list[str]]:
    """Capacities of L1..L3 (sysfs, or DEFAULT_LEVEL_BYTES with a note) and DRAM."""
    sizes, private = read_caches(cpu)
    sizes = {level: size for level, size in sizes.items() if level in LEVELS}
    if "L1" not in sizes:
        notes.append(f"no cache sizes in sysfs: assumed {DEFAULT_LEVEL_BYTES}")
        sizes, private = dict(DEFAULT_LEVEL_BYTES), ["L1", "L2"]
    sizes["DRAM"] = physical_memory_bytes()
    return sizes, [level for level in LEVELS if level in private]


# --------------------------------------------------------------------------------------
# Target facts.


def _is_x86_target(target: Any) -> bool:
    """x86 by its triple, or by this machine when the target names none (host targets)."""
    triple = str(target.attrs.get("mtriple", "") or "")
    return triple.startswith(("x86_64", "i686")) or (not triple and platform.machine() in _X86)


def _target_has(target: Any, feature: str) -> bool:
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
    if not _is_x86_target(target):
        return None
    kept = [flag for feature, flag in _TARGET_FLAGS if _target_has(target, feature)]
    dropped = {flag for _, flag in _TARGET_FLAGS} - set(kept)
    host = set((cpuinfo_fields().get("flags") or "").split())
    return sorted(host - dropped)


def check_runs_here(target: Any) -> None:
    """Raise ValueError when the target's code would not run on this CPU: limits are
    measured by running kernels here, so an x86 target may only use flags this CPU has."""
    from dlas.targets.host import X86_FEATURE_FLAGS, missing_features  # as `host` checks

    if not _is_x86_target(target):
        return
    host = (cpuinfo_fields().get("flags") or "").split()
    mattr = tuple(str(a) for a in target.attrs.get("mattr", None) or ())
    missing = [X86_FEATURE_FLAGS[f] for f in
               missing_features(str(target.attrs.get("mcpu", "") or "generic"), host, mattr)]
    if missing:
        raise ValueError(f"target {target} uses {missing}, which this CPU lacks: limits are "
                         "measured on the machine itself")


def simd_bits(target: Any) -> int:
    """Vector register width the kernels use for this target (`target_simd`'s)."""
    from dlas.tir.schedule_helpers import target_simd

    return target_simd(target).bits


# --------------------------------------------------------------------------------------
# The kernels (TVMScript; closures fix their shapes).


def fma_kernel(threads: int, chains: int, lanes: int) -> Any:
    """`chains` x `lanes` float32 accumulators per thread, `n` rounds of acc * a + b."""
    from tvm.script import tirx as T

    @T.prim_func
    def fma(x: T.Buffer((threads, chains, lanes), "float32"),
            y: T.Buffer((threads, chains, lanes), "float32"),
            a: T.float32, b: T.float32, n: T.int32):
        T.func_attr({"global_symbol": "fma", "tirx.noalias": True})
        for p in T.parallel(threads):
            acc = T.alloc_buffer((chains, lanes), "float32", scope="local")
            for k in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[k, v] = x[p, k, v]
            for _ in range(n):
                for k in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[k, v] = acc[k, v] * a + b
            for k in T.unroll(chains):
                for v in T.vectorized(lanes):
                    y[p, k, v] = acc[k, v]

    return fma


def vnni_kernel(threads: int, chains: int) -> Any:
    """`chains` int32x16 accumulators per thread, `n` rounds of vpdpbusd(acc, u8x64, s8x64)."""
    from tvm.script import tirx as T

    @T.prim_func
    def vnni(x: T.Buffer((threads, chains, 16), "int32"),
             y: T.Buffer((threads, chains, 16), "int32"),
             u: T.Buffer((64,), "uint8"), s: T.Buffer((64,), "int8"), n: T.int32):
        T.func_attr({"global_symbol": "vnni", "tirx.noalias": True})
        for p in T.parallel(threads):
            acc = T.alloc_buffer((chains, 16), "int32", scope="local")
            for k in T.unroll(chains):
                acc[k, T.ramp(0, 1, 16)] = x[p, k, T.ramp(0, 1, 16)]
            for _ in range(n):
                for k in T.unroll(chains):
                    acc[k, T.ramp(0, 1, 16)] = T.call_llvm_pure_intrin(
                        T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                        acc[k, T.ramp(0, 1, 16)], u[T.ramp(0, 1, 64)], s[T.ramp(0, 1, 64)],
                        dtype="int32x16")
            for k in T.unroll(chains):
                y[p, k, T.ramp(0, 1, 16)] = acc[k, T.ramp(0, 1, 16)]

    return vnni


def clock_kernel(threads: int) -> Any:
    """One dependent chain x = (x ^ a) + b per thread, `n` iterations."""
    from tvm.script import tirx as T

    @T.prim_func
    def clock(x: T.Buffer((threads, 16), "int32"), a: T.int32, b: T.int32, n: T.int32):
        T.func_attr({"global_symbol": "clock", "tirx.noalias": True})
        for p in T.parallel(threads):
            acc = T.alloc_buffer((1,), "int32", scope="local")
            acc[0] = x[p, 0]
            for _ in range(n):
                acc[0] = T.bitwise_xor(acc[0], a) + b
            x[p, 0] = acc[0]

    return clock


def triad_kernel(threads: int, lanes: int) -> Any:
    """a = b + s * c over (threads, m, lanes) arrays (m at run time), `reps` passes."""
    from tvm.script import tirx as T

    @T.prim_func
    def triad(a: T.handle, b: T.handle, c: T.handle, s: T.float32, reps: T.int32):
        T.func_attr({"global_symbol": "triad", "tirx.noalias": True})
        m = T.int32()
        A = T.match_buffer(a, (threads, m, lanes), "float32")
        B = T.match_buffer(b, (threads, m, lanes), "float32")
        C = T.match_buffer(c, (threads, m, lanes), "float32")
        for p in T.parallel(threads):
            for _ in range(reps):
                for i in range(m):
                    for v in T.vectorized(lanes):
                        A[p, i, v] = B[p, i, v] + s * C[p, i, v]

    return triad


def compile_kernel(func: Any, name: str, target: Any) -> Any:
    """The runtime module of one PrimFunc built for `target`."""
    import tvm

    return tvm.compile(tvm.IRModule({name: func}), target=target).mod


def best_seconds(module: Any, name: str, *args: Any) -> float:
    """Seconds per call: the best of REPEATS repeats, each >= MIN_REPEAT_MS of calls.

    The minimum, not the median: a peak is what the machine can do, and on a VM every
    disturbance only slows a repeat down.
    """
    import tvm

    evaluator = module.time_evaluator(name, tvm.cpu(), number=1, repeat=REPEATS,
                                      min_repeat_ms=MIN_REPEAT_MS)
    return float(min(evaluator(*args).results))


def _tensor(array: np.ndarray) -> Any:
    import tvm

    return tvm.runtime.tensor(array, tvm.cpu())


# --------------------------------------------------------------------------------------
# Measurements.


def measure_clock(target: Any, threads: int) -> float:
    """GHz of the slowest of `threads` threads running the dependent integer chain."""
    module = compile_kernel(clock_kernel(threads), "clock", target)
    x = _tensor(np.zeros((threads, 16), "int32"))
    seconds = best_seconds(module, "clock", x, 0x5A5A5A5A, 7, CLOCK_ITERS)
    return CLOCK_CYCLES_PER_ITER * CLOCK_ITERS / seconds / 1e9


def parallel_clock(target: Any, threads: int, notes: list[str]) -> float:
    """The clock with all threads running, once they do run in parallel.

    On the 2-vCPU VMs the hypervisor at times runs both vCPUs on one core for seconds
    (DESIGN.md: "two threads slower than one"), which halves every multi-thread figure.
    One thread's clock is the reference; PARALLEL_TRIES waits of PARALLEL_WAIT_S, then
    the limits are measured anyway and a note says they are understated.
    """
    clock = measure_clock(target, threads)
    if threads == 1:
        return clock
    single = measure_clock(target, 1)
    for _ in range(PARALLEL_TRIES):
        if clock >= PARALLEL_MIN_RATIO * single:
            return clock
        time.sleep(PARALLEL_WAIT_S)
        clock = measure_clock(target, threads)
    if clock < PARALLEL_MIN_RATIO * single:
        notes.append(f"threads did not run in parallel ({threads} threads at {clock:.2f} GHz "
                     f"each, 1 thread at {single:.2f}): limits understated, re-measure")
    return clock


def read_placement(cpus: list[int] | None, threads: int, notes: list[str]) -> str:
    """The placement label of the pinned CPUs now (`dlas.measure.placement`)."""
    from dlas.measure import placement

    if threads == 1:
        return placement.SINGLE
    if not cpus:
        return placement.UNKNOWN
    try:
        reading = placement.PlacementProbe(cpus).read()
    except Exception as err:  # noqa: BLE001 - the probe is advisory; never fail on it
        notes.append(f"placement probe failed: {err}")
        return placement.UNKNOWN
    if reading.round_trip_ns is not None:
        notes.append(f"placement {reading.state}: {reading.round_trip_ns:.0f} ns round trip")
    return reading.state


def fma_expected(x: np.ndarray, iterations: int, step: float) -> np.ndarray:
    """The FMA kernel's exact output for a = 1, b = step (float32 sums stay exact while
    x + iterations x step < 2^24 x step)."""
    return (x.astype(np.float64) + iterations * step).astype(np.float32)


def measure_fp32_peak(target: Any, threads: int, lanes: int) -> tuple[float, bool, str]:
    """(GFLOP/s, output exact, assembly) of the fp32 FMA kernel on `threads` threads."""
    module = compile_kernel(fma_kernel(threads, FMA_CHAINS, lanes), "fma", target)
    step = 2.0**-8
    x = np.random.default_rng(0).integers(0, 64, (threads, FMA_CHAINS, lanes))
    x = x.astype("float32")
    x_t, y_t = _tensor(x), _tensor(np.zeros_like(x))
    seconds = best_seconds(module, "fma", x_t, y_t, 1.0, step, FMA_ITERS)
    exact = bool(np.array_equal(y_t.numpy(), fma_expected(x, FMA_ITERS, step)))
    flops = 2 * threads * FMA_CHAINS * lanes * FMA_ITERS
    return flops / seconds / 1e9, exact, _assembly(module)


def _assembly(module: Any) -> str:
    try:
        return str(module.inspect_source("asm"))
    except Exception:  # noqa: BLE001 - a module that cannot show its assembly
        return ""


#: The int8 operands: u8 and s8 byte patterns whose 4-byte dot product is 9 per lane.
_VNNI_U = np.array([1, 2, 3, 4] * 16, "uint8")
_VNNI_S = np.array([1, -1, 2, 1] * 16, "int8")


def vnni_expected(x: np.ndarray, iterations: int) -> np.ndarray:
    """The VNNI kernel's output: every lane gains dot(u, s) per iteration, mod 2^32."""
    per_lane = int(np.dot(_VNNI_U[:4].astype(np.int64), _VNNI_S[:4].astype(np.int64)))
    total = x.astype(np.int64) + iterations * per_lane
    return ((total + 2**31) % 2**32 - 2**31).astype(np.int32)


def measure_int8_peak(target: Any, threads: int) -> tuple[float, bool]:
    """(GOP/s, output exact) of the VNNI kernel on `threads` threads."""
    module = compile_kernel(vnni_kernel(threads, INT8_CHAINS), "vnni", target)
    x = np.random.default_rng(0).integers(0, 1000, (threads, INT8_CHAINS, 16)).astype("int32")
    x_t, y_t = _tensor(x), _tensor(np.zeros_like(x))
    seconds = best_seconds(module, "vnni", x_t, y_t, _tensor(_VNNI_U), _tensor(_VNNI_S),
                           FMA_ITERS)
    exact = bool(np.array_equal(y_t.numpy(), vnni_expected(x, FMA_ITERS)))
    ops = 2 * 64 * threads * INT8_CHAINS * FMA_ITERS
    return ops / seconds / 1e9, exact


def level_capacity(level_bytes: dict[str, int], private_levels: Iterable[str], level: str,
                   threads: int) -> int:
    """Bytes `threads` threads can keep in `level`: each core has its own instance of a
    private level (L1, L2 on x86), so threads x one instance; a shared level holds one."""
    size = level_bytes[level]
    return size * threads if level in set(private_levels) else size


def working_sets(level_bytes: dict[str, int], private_levels: list[str], threads: int,
                 notes: list[str]) -> dict[str, int]:
    """Triad working set (bytes, all threads) per level.

    Half of each cache level's capacity for these threads: small enough that the triad's
    three arrays, the stack and the code stay resident, large enough that the level below
    cannot hold it. DRAM: 4 x the L3 capacity and at least DRAM_MIN_BYTES.
    """
    sets: dict[str, int] = {}
    below = 0
    for level in ("L1", "L2", "L3"):
        if level not in level_bytes:
            continue
        size = level_capacity(level_bytes, private_levels, level, threads) // 2
        if size <= below:
            notes.append(f"{level}: half its capacity ({size} B) fits in the level below; "
                         "its bandwidth is partly the faster level's")
        sets[level] = size
        below = 2 * size
    largest = max((level_capacity(level_bytes, private_levels, lv, threads)
                   for lv in ("L1", "L2", "L3") if lv in level_bytes), default=0)
    sets["DRAM"] = max(4 * largest, DRAM_MIN_BYTES)
    return sets


def triad_gbs(module: Any, threads: int, lanes: int, working_set: int) -> tuple[float, int]:
    """(GB/s, bytes measured at) of the triad at about `working_set` bytes, all threads."""
    rows = max(working_set // (threads * lanes * TRIAD_BYTES_PER_ELEMENT), 1)
    shape = (threads, rows, lanes)
    arrays = [_tensor(np.full(shape, value, "float32")) for value in (0.0, 1.0, 2.0)]
    bytes_per_pass = TRIAD_BYTES_PER_ELEMENT * threads * rows * lanes
    reps = max(TRIAD_CALL_BYTES // bytes_per_pass, 1)
    seconds = best_seconds(module, "triad", *arrays, 0.5, reps)
    if not np.all(arrays[0].numpy() == 2.0):
        raise RuntimeError("triad kernel computed a wrong result")
    return bytes_per_pass * reps / seconds / 1e9, bytes_per_pass


def measure_bandwidth(target: Any, threads: int, lanes: int,
                      sets: dict[str, int]) -> tuple[dict[str, float], dict[str, int]]:
    """Triad GB/s and the exact working set per level."""
    module = compile_kernel(triad_kernel(threads, lanes), "triad", target)
    gbs: dict[str, float] = {}
    measured_at: dict[str, int] = {}
    for level, size in sets.items():
        gbs[level], measured_at[level] = triad_gbs(module, threads, lanes, size)
    return gbs, measured_at


@contextmanager
def thread_pool(threads: int, cpus: list[int] | None) -> Iterator[None]:
    """TVM's pool at `threads` workers pinned to `cpus` for the block.

    Afterwards: the calling thread's CPU set and TVM_NUM_THREADS as they were, and the
    pool floating at the size TVM_NUM_THREADS said before (else `threads`). Its earlier
    size cannot be read: asking creates the pool, and a pool created at one worker can
    never grow (`pool_error`).
    """
    from dlas.measure.timing import set_num_threads

    affinity = os.sched_getaffinity(0)
    env = os.environ.get("TVM_NUM_THREADS")
    got = set_num_threads(threads, pin=cpus)
    try:
        if got != threads:
            raise RuntimeError(pool_error(threads, got))
        yield
    finally:
        set_num_threads(int(env) if env and env.isdigit() and int(env) > 0 else got)
        os.sched_setaffinity(0, affinity)
        if env is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = env


def pool_error(threads: int, got: int) -> str:
    """Why the pool did not take `threads`: TVM sizes its worker array once, when the pool
    is first used (TVM_NUM_THREADS, else half the CPUs: one on a 2-vCPU VM), and
    `runtime.config_threadpool` cannot go past that size (measured on TVM 0.27)."""
    return (f"TVM's thread pool took {got} threads, not {threads}: it was created smaller "
            "before; set TVM_NUM_THREADS >= the threads wanted before TVM first runs")


def choose_clock(measured: float | None, nominal: dict[str, float],
                 notes: list[str]) -> tuple[float, str]:
    """(GHz, source) for the theoretical peak: the measured clock when plausible (the
    nominal one is the base clock on VMs, well under what cores run at), else cpufreq's
    maximum, else /proc/cpuinfo."""
    if measured is not None and PLAUSIBLE_GHZ[0] <= measured <= PLAUSIBLE_GHZ[1]:
        said = ", ".join(f"{k} {v:.2f} GHz" for k, v in nominal.items()) or "nothing"
        return measured, f"measured by a dependent integer chain; nominal: {said}"
    if measured is not None:
        notes.append(f"measured clock {measured:.2f} GHz implausible: not used")
    for source in ("cpufreq_max", "cpuinfo"):
        if source in nominal:
            return nominal[source], source
    notes.append("no clock known: theoretical peak at 1 GHz is per-GHz only")
    return 1.0, "unknown"


def _compute_peaks(target: Any, threads: int, lanes: int, int8: bool,
                   notes: list[str]) -> dict[str, float]:
    peak, exact, asm = measure_fp32_peak(target, threads, lanes)
    if not exact:
        notes.append("fp32 FMA kernel output was not exact: peak suspect")
    if _is_x86_target(target) and _target_has(target, "fma") and "vfmadd" not in asm and asm:
        notes.append("fp32 kernel assembly has no vfmadd: LLVM did not contract a*x+b")
    peaks = {"float32": peak}
    if not int8:
        notes.append("int8 peak not measured: the target has no AVX512-VNNI")
        return peaks
    try:
        peaks["int8"], exact = measure_int8_peak(target, threads)
    except Exception as err:  # noqa: BLE001 - an LLVM whose vpdpbusd signature differs
        notes.append(f"int8 peak not measured: VNNI kernel failed ({type(err).__name__})")
        return peaks
    if not exact:
        notes.append("int8 VNNI kernel output was not exact: peak suspect")
    return peaks


def _sanity_notes(peaks: dict[str, float], theoretical: dict[str, float],
                  bandwidth: dict[str, float], notes: list[str]) -> None:
    for dtype, peak in peaks.items():
        bound = theoretical.get(dtype)
        if bound and peak > bound * THEORETICAL_SLACK:
            notes.append(f"{dtype} peak {peak:.1f} > theoretical {bound:.1f} x "
                         f"{THEORETICAL_SLACK}: the CPU table or the clock is wrong here")
    if "L1" in bandwidth and bandwidth["L1"] < bandwidth["DRAM"]:
        notes.append("L1 bandwidth below DRAM's: the triad was disturbed")


@dataclass
class _Readings:
    """What the kernels read on the pinned pool."""

    placement: str
    clock: float
    peaks: dict[str, float]
    bandwidth: dict[str, float]
    measured_sets: dict[str, int]


def _run_kernels(target: Any, threads: int, pinned: list[int] | None, lanes: int,
                 sets: dict[str, int], notes: list[str]) -> _Readings:
    """Clock, compute peaks and bandwidths on `threads` threads pinned to `pinned`."""
    with thread_pool(threads, pinned):
        placement = read_placement(pinned, threads, notes)
        clock = parallel_clock(target, threads, notes)
        int8 = _is_x86_target(target) and _target_has(target, "avx512vnni")
        peaks = _compute_peaks(target, threads, lanes, int8, notes)
        # Best of two readings around the compute kernels: another process on these CPUs
        # only ever lowers a reading, and a low clock would understate the theoretical.
        clock = max(clock, measure_clock(target, threads))
        bandwidth, measured_sets = measure_bandwidth(target, threads, lanes, sets)
        after = read_placement(pinned, threads, [])
    if after != placement:
        notes.append(f"placement changed while measuring: {placement} -> {after}")
    return _Readings(placement, clock, peaks, bandwidth, measured_sets)


def measure_limits(tvm_target: dict, threads: int, cpus: list[int] | None) -> MachineLimits:
    """Measure this machine's limits in this process (a few seconds).

    `cpus`: one CPU per thread to pin to; None pins to `pinnable_cpus(threads)`, or lets
    the threads float where this process may not use that many.
    """
    from dlas.compiler.build import make_target
    from dlas.measure.timing import pinnable_cpus
    from dlas.results.environment import machine_fingerprint

    start = time.perf_counter()
    target = make_target(tvm_target)
    check_runs_here(target)
    notes: list[str] = []
    pinned = list(cpus) if cpus is not None else pinnable_cpus(threads)
    if pinned is None:
        notes.append(f"{threads} threads exceed this process's CPUs: threads floated")
    level_bytes, private = level_sizes((pinned or [0])[0], notes)
    sets = working_sets(level_bytes, private, threads, notes)
    read = _run_kernels(target, threads, pinned, simd_bits(target) // 32, sets, notes)
    nominal = nominal_clocks()
    ghz, source = choose_clock(read.clock, nominal, notes)
    theoretical, basis = theoretical_peak(host_features(target_flags(target)), threads, ghz,
                                          source)
    _sanity_notes(read.peaks, theoretical, read.bandwidth, notes)
    notes.append("bandwidth: STREAM triad bytes (12 per float32 element), write-allocate "
                 "not counted")
    return MachineLimits(
        tvm_target=dict(tvm_target), threads=threads, cpus=list(pinned or []),
        peak_gflops=read.peaks, theoretical_gflops=theoretical, theoretical_basis=basis,
        clock_ghz={"measured": read.clock, **nominal}, bandwidth_gbs=read.bandwidth,
        bandwidth_bytes=read.measured_sets, level_bytes=level_bytes, private_levels=private,
        placement=read.placement, measured_at=time.time(),
        seconds=time.perf_counter() - start, machine=machine_fingerprint(), notes=notes)


# --------------------------------------------------------------------------------------
# The cache.


def cache_key(tvm_target: dict, threads: int) -> dict[str, Any]:
    """What the limits depend on: the machine (fingerprint plus CPU identity, which the
    fingerprint's model name does not give), the target, the threads, the method."""
    from dlas.results.environment import machine_fingerprint

    return {"machine": machine_fingerprint(), "cpu": cpu_identity(),
            "target": tvm_target, "threads": threads, "method": METHOD_VERSION}


def cache_path(cache_dir: Path, tvm_target: dict, threads: int) -> Path:
    """The cache file of these limits: one JSON file per key digest."""
    from dlas.sweep.grid import digest

    return Path(cache_dir) / "limits" / f"{digest(cache_key(tvm_target, threads))}.json"


def _read_cached(path: Path) -> MachineLimits | None:
    try:
        return MachineLimits.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so a reader sees the old file or the new one, never half."""
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


def cached_limits(cache_dir: Path, tvm_target: dict, threads: int, cpus: list[int] | None,
                  *, refresh: bool = False) -> MachineLimits:
    """The limits for this machine, target and threads: read from the cache under
    `cache_dir`, or measured (when missing, unreadable or `refresh`) and stored."""
    path = cache_path(cache_dir, tvm_target, threads)
    if not refresh:
        cached = _read_cached(path)
        if cached is not None:
            return cached
    limits = measure_limits(tvm_target, threads, cpus)
    write_atomic(path, json.dumps(limits.model_dump(mode="json"), indent=2))
    return limits
