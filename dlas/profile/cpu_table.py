"""The CPU table: what one core of each microarchitecture can start per cycle, and the
theoretical peak it bounds the measured one by.

Theoretical peak: cores x fp32 lanes per FMA pipe x FMA pipes x 2 x GHz. Why a table and
not the CPU's name: the model name reads "AMD EPYC" whatever the generation, and the
register width is not the pipes' (Zen 4 runs AVX-512 on 256-bit pipes), so an entry is
chosen by vendor, CPUID family and model, and /proc/cpuinfo flags. Every input is an
argument (`core_features`), so tests drive the table with forced flags and cover every
path whichever CPU the suite runs on; this machine's entry is
`dlas.profile.host_facts.host_features`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: Architectures (`platform.machine()`, a target triple's head) the x86 table covers.
X86_ARCHES = ("x86_64", "AMD64", "i686")

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
#: AMD family 25 (19h) models that are Zen 4: Genoa and Storm Peak 0x10-0x1F, Raphael and
#: Phoenix 0x60-0x7F, Bergamo and Siena 0xA0-0xAF; the rest (Milan 0x01, Vermeer 0x21,
#: Rembrandt 0x44, Cezanne 0x50) are Zen 3.
_ZEN4_MODELS = (range(0x10, 0x20), range(0x60, 0x80), range(0xA0, 0xB0))
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
    if family == 25:  # Zen 3 and Zen 4 both have two 256-bit FMA pipes
        if isa_bits >= 512 or any(model in r for r in _ZEN4_MODELS):
            # by its model when the flags (a hypervisor's mask, or an AVX2 target) hide
            # the AVX-512 that names it otherwise
            hidden = "" if isa_bits >= 512 else ", AVX-512 not used"
            return f"AMD Zen 4 (family 25, model {model:#x}{hidden})", 256, 2, False
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
    if arch in X86_ARCHES:
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

