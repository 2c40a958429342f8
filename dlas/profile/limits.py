"""The machine's measured limits: peak FLOP/s and bandwidth per memory level, measured
once per target and thread count and cached.

Why measured, and with TVM: a roofline judges each layer against what this machine can do
for code TVM and LLVM generate for this target, on the threads and CPUs the layers were
timed with. Datasheet numbers are not enough on the cloud VMs dlas runs on: the CPU model
reads "AMD EPYC" whatever the generation, and /proc/cpuinfo's "cpu MHz" is the nominal
clock, well under the clock the cores run their FMAs at (docs/profile.md, "measured on").
So every figure comes from a kernel compiled by `tvm.compile` for the target and timed
here (`dlas.profile.limit_kernels`: what each kernel computes and how it is counted),
and the theoretical peak beside it is the CPU table's (`dlas.profile.cpu_table`) for
this host (`dlas.profile.host_facts`) at the measured clock.

This module holds the procedure around the kernels: the pinned thread pool, waiting for
the threads to run in parallel, one working set per memory level, the clock chosen for
the theoretical peak, the sanity notes; the record (`MachineLimits`), and its cache (one
JSON file per machine, CPU, target, threads and method under the cache folder's
`limits/`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from dlas.integrity import write_atomically
from dlas.profile.cpu_table import theoretical_peak
from dlas.profile.host_facts import (
    check_runs_here,
    cpu_identity,
    host_features,
    is_x86_target,
    nominal_clocks,
    physical_memory_bytes,
    read_caches,
    target_flags,
    target_has,
)
from dlas.profile.limit_kernels import (
    measure_bandwidth,
    measure_clock,
    measure_fp32_peak,
    measure_int8_peak,
    simd_bits,
)

#: Memory levels, smallest first, as `bandwidth_gbs` and `level_bytes` key them.
LEVELS = ("L1", "L2", "L3", "DRAM")
#: Bump when a kernel or a sizing rule changes: cached limits of another method are stale.
METHOD_VERSION = 1

#: Clocks outside this range mean the probe was fooled (or descheduled): not used.
PLAUSIBLE_GHZ = (0.3, 7.0)
#: Threads run in parallel when the clock with all of them running is at least this share
#: of one thread's; far below it, two threads share one CPU (a hypervisor state).
PARALLEL_MIN_RATIO = 0.8
#: Waits for the threads to run in parallel before measuring anyway, and the wait (s).
PARALLEL_TRIES = 3
PARALLEL_WAIT_S = 1.0
#: The DRAM working set: 4 x the L3 capacity, and at least this.
DRAM_MIN_BYTES = 256 << 20
#: Measured peak above theoretical x this is reported in `notes`.
THEORETICAL_SLACK = 1.1
#: Cache sizes used where sysfs has none (and said so in notes).
DEFAULT_LEVEL_BYTES = {"L1": 32 << 10, "L2": 512 << 10, "L3": 8 << 20}


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
# Memory levels: sizes, capacities, the triad's working sets.


def level_sizes(cpu: int, notes: list[str]) -> tuple[dict[str, int], list[str]]:
    """Capacities of L1..L3 (sysfs, or DEFAULT_LEVEL_BYTES with a note) and DRAM."""
    sizes, private = read_caches(cpu)
    sizes = {level: size for level, size in sizes.items() if level in LEVELS}
    if "L1" not in sizes:
        notes.append(f"no cache sizes in sysfs: assumed {DEFAULT_LEVEL_BYTES}")
        sizes, private = dict(DEFAULT_LEVEL_BYTES), ["L1", "L2"]
    sizes["DRAM"] = physical_memory_bytes()
    return sizes, [level for level in LEVELS if level in private]



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


# --------------------------------------------------------------------------------------
# The pinned pool, the threads running in parallel, the clock.


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



@contextmanager
def thread_pool(threads: int, cpus: list[int] | None) -> Iterator[None]:
    """TVM's pool at `threads` workers pinned to `cpus` for the block.

    Afterwards: the calling thread's CPU set and TVM_NUM_THREADS as they were, and the
    pool floating at the size TVM_NUM_THREADS said before (else `threads`). Its earlier
    size cannot be read: asking creates the pool, and a pool created at one worker can
    never grow (`pool_error`).
    """
    from dlas.measure.vm_timing import set_num_threads

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


# --------------------------------------------------------------------------------------
# Measurement.


def _compute_peaks(target: Any, threads: int, lanes: int, int8: bool,
                   notes: list[str]) -> dict[str, float]:
    peak, exact, asm = measure_fp32_peak(target, threads, lanes)
    if not exact:
        notes.append("fp32 FMA kernel output was not exact: peak suspect")
    if is_x86_target(target) and target_has(target, "fma") and "vfmadd" not in asm and asm:
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
        int8 = is_x86_target(target) and target_has(target, "avx512vnni")
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
    from dlas.measure.vm_timing import pinnable_cpus
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
    write_atomically(path, json.dumps(limits.model_dump(mode="json"), indent=2))
    return limits
