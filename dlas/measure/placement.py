"""Where the measurement's CPUs sit relative to each other right now: the placement probe.

Why this exists (measured, `docs/timing.md` and `../shared/probes/`): on the 2-vCPU cloud
VMs dlas runs on, the hypervisor moves the two vCPUs between cores that share a core
complex and cores that do not, every few seconds to minutes, whatever the guest does. A
cache line passed between the two CPUs takes 60-110 ns in the first case ("near") and
300-400 ns in the second ("far"). Multi-threaded batch-1 inference synchronises its
threads at every operator, so it pays that round trip dozens of times per inference:
far placement made ONNX Runtime 2x and TVM 1.4x slower, while one-thread timings held
within 3%. No load or steal figure shows it. So every chunk of samples taken with more
than one thread is labelled with the placement it was taken in, and dlas compares
timings only within one placement (`dlas.results.statistics`).

How: a C ping-pong (`native/pingpong.c`) between the first CPU of the measurement and
each other one, built once per machine with the C compiler TVM itself needs to export
libraries, loaded with ctypes. A reading costs about 1 ms near and 5 ms far.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlas.user_cache import user_cache_dir

#: Round trips at or below this are "near" (CPUs sharing a core complex: 60-110 ns seen).
NEAR_MAX_NS = 200.0
#: Above this the probe itself was disturbed (a preempted vCPU), not a placement: "erratic".
FAR_MAX_NS = 1000.0
#: Round trips per burst and bursts per reading (the reading is their median).
ITERS = 4000
BURSTS = 3
#: Passes of the cache-contention reading per CPU (about 5 us each).
CACHE_PASSES = 3

#: Labels. A measurement on one CPU does not synchronise across CPUs: `SINGLE` compares
#: with every placement. `UNKNOWN`: no probe could run (no C compiler, a remote board).
NEAR, FAR, ERRATIC, SINGLE, UNKNOWN = "near", "far", "erratic", "single", "unknown"

#: Label of a chunk whose placement changed while it was taken.
MIXED = "mixed"
#: Label of a chunk taken while something else used a measurement CPU's core caches
#: (most likely another guest on its SMT sibling): the cache reading right before the
#: chunk (`cache_stream_ns`) exceeded `dlas.measure.contention.CONTENTION_FACTOR` x that
#: CPU's usual reading. Not used, like MIXED. The reading after the chunk is recorded
#: but does not judge: it also reads the variant's own pool threads still spinning
#: (after PyTorch's chunks: 10.4 ns/KiB, against 8.6 before them).
CONTENDED = "contended"
#: Label of a chunk whose round trip between the measurement's CPUs was slower than usual
#: for its placement, where such chunks ran slower (`dlas.measure.round_trip`: a finer
#: state inside "near" that slowed every runtime 1.2-1.9x on a Zen 4). Not used.
SLOW_ROUND_TRIP = "slow_round_trip"
#: Labels of chunks that are never used for a figure.
UNUSABLE = (MIXED, CONTENDED, SLOW_ROUND_TRIP, ERRATIC)
#: Preference when one placement must be chosen for a headline figure: the state a
#: multi-threaded timing is fastest and most repeatable in first.
PREFERENCE = (SINGLE, NEAR, FAR, UNKNOWN, ERRATIC)
#: Steady placements a timing taken on this machine is labelled with (UNKNOWN: a board
#: or no probe; ERRATIC: no steady state).
LOCAL_PLACEMENTS = (SINGLE, NEAR, FAR)

_SOURCE = Path(__file__).with_name("native") / "pingpong.c"
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_build_error: str | None = None


def classify(round_trip_ns: float | None) -> str:
    """The placement a round-trip time means (see the module doc for the bands)."""
    if round_trip_ns is None or round_trip_ns <= 0:
        return UNKNOWN
    if round_trip_ns <= NEAR_MAX_NS:
        return NEAR
    if round_trip_ns <= FAR_MAX_NS:
        return FAR
    return ERRATIC


def comparable(a: str | None, b: str | None) -> bool:
    """Whether timings taken in placements `a` and `b` may be compared: the same
    placement, or either on a single CPU (which no placement affects)."""
    return a == b or SINGLE in (a, b)


@dataclass(frozen=True)
class PlacementReading:
    """One probe reading: the label, the slowest round trip from the first CPU, and the
    cache-contention reading of each CPU (`cache_stream_ns`, in the probe's CPU order;
    empty when not read)."""

    state: str
    round_trip_ns: float | None = None
    cache_ns: tuple[float | None, ...] = ()


def _cache_dir() -> Path:
    return user_cache_dir() / "native"


def _compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def build_library(out_dir: Path | None = None) -> Path:
    """Compile the ping-pong into a shared library (once per source version and machine
    folder); return its path. Raises RuntimeError with what to do when it cannot."""
    source = _SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    out_dir = out_dir or _cache_dir()
    target = out_dir / f"pingpong-{digest}.so"
    if target.is_file():
        return target
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) to build the placement probe; "
                           "install one (TVM needs it to export libraries too)")
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp,
                               str(_SOURCE)], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"building the placement probe with {cc} failed: "
                               f"{done.stderr.strip()[:500]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def _load() -> ctypes.CDLL | None:
    """The probe library, built on first use; None (reason in `_build_error`) if it
    cannot be built here."""
    global _library, _build_error
    with _lock:
        if _library is None and _build_error is None:
            try:
                lib = ctypes.CDLL(str(build_library()))
                lib.dlas_pingpong_ns.restype = ctypes.c_double
                lib.dlas_pingpong_ns.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long]
                lib.dlas_probe_ns.restype = ctypes.c_int
                lib.dlas_probe_ns.argtypes = [
                    ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_int, ctypes.c_int,
                    ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
                lib.dlas_cache_stream_ns.restype = ctypes.c_double
                lib.dlas_cache_stream_ns.argtypes = [ctypes.c_int, ctypes.c_int]
                _library = lib
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                _build_error = str(exc)
        return _library


def probe_unavailable() -> str | None:
    """Why no placement probe can run here, or None when one can."""
    _load()
    return _build_error


def round_trip_ns(cpu_a: int, cpu_b: int, iters: int = ITERS) -> float | None:
    """Nanoseconds per cache-line round trip between two CPUs; None if not measurable."""
    lib = _load()
    if lib is None:
        return None
    value = float(lib.dlas_pingpong_ns(int(cpu_a), int(cpu_b), int(iters)))
    return value if value > 0 else None


def probe_ns(cpu_a: int, cpu_b: int, bursts: int = BURSTS, iters: int = ITERS,
             cache_passes: int = CACHE_PASSES
             ) -> tuple[list[float | None], tuple[float | None, float | None]]:
    """One placement reading's native work in one call: `bursts` round trips between the
    CPUs (as `round_trip_ns`) and, with `cache_passes`, each CPU's cache reading (as
    `cache_stream_ns`), the other CPU's read by the partner thread already there. Why one
    call: every wake of an idle vCPU costs about a 4 ms scheduler tick on these VMs, and
    a reading built of separate calls (a partner per burst, a migration per cache
    reading) took 12 ms, twice per chunk (`native/pingpong.c`). Nones if not measurable."""
    lib = _load()
    if lib is None:
        return [None] * bursts, (None, None)
    trips = (ctypes.c_double * bursts)()
    cache = (ctypes.c_double * 2)()
    done = int(lib.dlas_probe_ns(int(cpu_a), int(cpu_b), int(iters), int(bursts),
                                 int(cache_passes), trips, cache))
    if done != bursts:
        return [None] * bursts, (None, None)
    a, b = (float(v) if v > 0 else None for v in cache)
    return [float(v) if v > 0 else None for v in trips], (a, b)


def cache_stream_ns(cpu: int, passes: int = CACHE_PASSES) -> float | None:
    """Nanoseconds per KiB streamed from a core-sized cache buffer on `cpu` (best of
    `passes`); None if not measurable. High while something else uses the core's caches."""
    lib = _load()
    if lib is None:
        return None
    value = float(lib.dlas_cache_stream_ns(int(cpu), int(passes)))
    return value if value > 0 else None


class PlacementProbe:
    """Reads the placement of the CPUs a measurement's threads run on.

    `cpus`: those CPUs, the first being where the calling (master) thread runs. With one
    CPU there is nothing to probe (`SINGLE`). `reader(a, b)`, one burst's round trip,
    replaces the ping-pong in tests; without it a reading's bursts come from one native
    call (`probe_ns`).
    """

    def __init__(self, cpus: Sequence[int], *, bursts: int = BURSTS,
                 reader: Callable[[int, int], float | None] | None = None,
                 cache_reader: Callable[[int], float | None] | None = None) -> None:
        self.cpus = list(cpus)
        self.bursts = max(1, bursts)
        self._read = reader
        #: Reads a CPU's cache contention; by default the native one (inside the native
        #: reading, `probe_ns`), unless `reader` was replaced (a test's fake placement)
        #: and this was not.
        self._cache = cache_reader
        self._native_cache = reader is None and cache_reader is None

    def read(self) -> PlacementReading:
        if len(self.cpus) < 2:
            return PlacementReading(SINGLE)
        first, others = self.cpus[0], self.cpus[1:]
        worst: float | None = None
        native: dict[int, float | None] = {}
        for other in others:
            if self._read is not None:
                values = [self._read(first, other) for _ in range(self.bursts)]
            else:
                values, (mine, theirs) = probe_ns(
                    first, other, self.bursts,
                    cache_passes=CACHE_PASSES if self._native_cache else 0)
                native.setdefault(first, mine)
                native[other] = theirs
            good = [v for v in values if v is not None]
            if not good:
                return PlacementReading(UNKNOWN)
            value = statistics.median(good)
            worst = value if worst is None else max(worst, value)
        if self._native_cache:
            cache = tuple(native.get(cpu) for cpu in self.cpus)
        else:
            cache = tuple(self._cache(cpu) for cpu in self.cpus) if self._cache else ()
        return PlacementReading(classify(worst), worst, cache)

    def describe(self) -> dict[str, object]:
        return {"kind": "core-to-core round trip", "cpus": self.cpus,
                "near_max_ns": NEAR_MAX_NS, "far_max_ns": FAR_MAX_NS}
