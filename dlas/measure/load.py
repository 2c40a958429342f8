"""Whether other processes use the CPUs a local measurement runs on: the load probe.

Why this exists: a timing taken while other processes use the CPUs is not a result. On
the 2-vCPU machines dlas runs on, one busy process beside a 2-thread TVM measurement
made a 0.025 ms model time 0.056 ms (median 2.2x off) *with an unchanged coefficient of
variation* (15-19% both ways), and two busy processes made it 40 ms (TVM's thread pool
waits for its preempted thread). The spread of the samples cannot reveal the first case,
so the sampler (`dlas.measure.rounds`) watches the machine itself.

How (`CpuLoadProbe`), and why so: over the window in which a round of samples is taken,
the CPU time the kernel charged to the CPUs this process may run on (`/proc/stat`, steal
and interrupts included), minus this process's own CPU time, is the work of *other*
processes, in cores. That reads 0.0 on a quiet machine and 1.0 or 2.0 with one or two
busy-loop processes, exactly. It is compared with what the measurement leaves free (CPUs
minus its threads) plus a margin and the error of tick-based accounting. The alternatives
were measured on the same machine and rejected: `/proc/loadavg` is a one-minute average
that had not moved a second after the load began; a calibration kernel (SHA-256 on two
threads, a few ms, its idle time the minimum of its runs) spread from 1.0x to 1.7x its
idle time on a quiet machine (90th percentile), read 1.7x-1.9x right after a TVM or ONNX
Runtime chunk because their own pool threads still spin, and missed one busy process
when its idle time was taken under load: too unreliable to gate on.

What the probe cannot see is where the hypervisor has placed the vCPUs: that is
`dlas.measure.placement`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: A load reading covers at least this long (a shorter chunk is padded by waiting).
MIN_WINDOW_S = 0.1
#: Other processes may use this many cores beyond what the measurement leaves free
#: before the machine counts as busy (daemons, the console, the kernel's own work).
MARGIN_CORES = 0.25
#: How long one poll lasts while waiting for a busy machine to become quiet.
POLL_S = 0.25

#: Kernel clock tick: CPU time in /proc/stat is counted in these.
try:
    TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):  # not Linux
    TICK_S = 0.01


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU seconds at one instant: all work on the watched CPUs, of which steal, and this
    process's own."""

    busy_s: float
    steal_s: float
    own_s: float
    at: float


def read_cpu_times(cpus: Sequence[int]) -> tuple[float, float, float]:
    """(busy seconds of `cpus` since boot, of which steal, this process's CPU seconds).

    Busy is everything but idle and iowait, steal included: a hypervisor giving the vCPU
    to another guest slows a measurement as much as a local process does. Guest time is
    already inside user time on Linux.
    """
    import psutil

    per_cpu = psutil.cpu_times(percpu=True)
    busy = steal = 0.0
    for i in cpus:
        if i < len(per_cpu):
            c = per_cpu[i]
            c_steal = getattr(c, "steal", 0.0)
            busy += (c.user + c.nice + c.system + getattr(c, "irq", 0.0)
                     + getattr(c, "softirq", 0.0) + c_steal)
            steal += c_steal
    own = psutil.Process().cpu_times()
    return busy, steal, own.user + own.system


@dataclass(frozen=True)
class LoadReading:
    """What other processes did on the measurement's CPUs during one window."""

    window_s: float
    #: CPU time of other processes (and steal) per second of window, in cores.
    other_cores: float
    steal_cores: float
    #: Above this the machine counts as busy for this measurement.
    limit_cores: float

    @property
    def loaded(self) -> bool:
        return self.other_cores > self.limit_cores

    def as_dict(self) -> dict[str, float]:
        return {"other_cores": round(self.other_cores, 3),
                "steal_cores": round(self.steal_cores, 3),
                "limit_cores": round(self.limit_cores, 3),
                "window_s": round(self.window_s, 3)}

    def describe(self) -> str:
        steal = f", {self.steal_cores:.2f} of it hypervisor steal" if self.steal_cores >= 0.05 \
            else ""
        return (f"other processes used {self.other_cores:.2f} cores{steal} "
                f"(limit {self.limit_cores:.2f})")


class CpuLoadProbe:
    """Notices other work on the CPUs a local measurement runs on (see the module doc).

    `threads`: the CPUs the measurement itself keeps busy; the rest of `cpus` may be used
    by others without disturbing it (up to the margin). `reader` and `clock`/`sleep` are
    injectable so tests can force any reading.
    """

    def __init__(self, threads: int, cpus: Sequence[int] | None = None, *,
                 margin_cores: float = MARGIN_CORES, min_window_s: float = MIN_WINDOW_S,
                 reader: Callable[[Sequence[int]], tuple[float, float, float]] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if cpus is None:
            from dlas.targets.host import allowed_cpus

            cpus = allowed_cpus()
        self.cpus = list(cpus)
        self.threads = max(1, int(threads))
        self.margin_cores = margin_cores
        self.min_window_s = min_window_s
        self._read = reader or read_cpu_times
        self.clock, self.sleep = clock, sleep

    @property
    def free_cores(self) -> int:
        """CPUs the measurement leaves to others."""
        return max(0, len(self.cpus) - self.threads)

    def limit(self, window_s: float) -> float:
        """Cores others may use in a window of this length: the free ones, the margin, and
        the accounting error (about one tick per CPU at each end of the window)."""
        slack = (len(self.cpus) + 1) * TICK_S / max(window_s, 1e-9)
        return self.free_cores + self.margin_cores + slack

    def begin(self) -> CpuSnapshot:
        busy, steal, own = self._read(self.cpus)
        return CpuSnapshot(busy, steal, own, self.clock())

    def end(self, start: CpuSnapshot) -> LoadReading:
        """The reading since `start`, after padding the window to `min_window_s`."""
        short = self.min_window_s - (self.clock() - start.at)
        if short > 0:
            self.sleep(short)
        now = self.begin()
        window = max(now.at - start.at, 1e-9)
        others = (now.busy_s - start.busy_s) - (now.own_s - start.own_s)
        return LoadReading(window_s=window, other_cores=max(0.0, others / window),
                           steal_cores=max(0.0, (now.steal_s - start.steal_s) / window),
                           limit_cores=self.limit(window))

    def wait_until_quiet(self, timeout_s: float) -> tuple[LoadReading | None, float]:
        """Poll until one window is quiet or `timeout_s` passes; (last reading, seconds
        waited). The reading is None when there was no time to take one."""
        start = self.clock()
        reading = None
        while True:
            left = timeout_s - (self.clock() - start)
            if left < self.min_window_s:
                return reading, self.clock() - start
            mark = self.begin()
            self.sleep(min(POLL_S, left))
            reading = self.end(mark)
            if not reading.loaded:
                return reading, self.clock() - start

    def describe(self) -> dict[str, Any]:
        return {"kind": "cpu time of other processes", "cpus": self.cpus,
                "threads": self.threads, "margin_cores": self.margin_cores}


def busiest_processes(interval_s: float = 0.2, top: int = 3) -> list[str]:
    """'name[pid] 0.98 cores' for the processes that used the most CPU over `interval_s`,
    this one excluded: what a message about a busy machine should name."""
    import psutil

    me = os.getpid()

    def snapshot() -> dict[int, tuple[str, float]]:
        out = {}
        for proc in psutil.process_iter(["name", "cpu_times"]):
            times = proc.info.get("cpu_times")
            if proc.pid != me and times is not None:
                out[proc.pid] = (proc.info.get("name") or "?", times.user + times.system)
        return out

    before = snapshot()
    time.sleep(interval_s)
    after = snapshot()
    used = [(after[pid][1] - before[pid][1], after[pid][0], pid)
            for pid in after if pid in before]
    used.sort(reverse=True)
    return [f"{name}[{pid}] {cpu / interval_s:.2f} cores" for cpu, name, pid in used[:top]
            if cpu / interval_s >= 0.05]
