"""Timing samples that know whether the machine was quiet while they were taken.

Why this exists: a timing taken while other processes use the CPUs is not a result. On
the 2-vCPU machines dlas runs on, one busy process beside a 2-thread TVM measurement
made a 0.025 ms model time 0.056 ms (median 2.2x off) *with an unchanged coefficient of
variation* (15-19% both ways), and two busy processes made it 40 ms (TVM's thread pool
waits for its preempted thread). The spread of the samples cannot reveal the first case,
so the measure stage watches the machine itself.

How the machine is watched (`CpuLoadProbe`), and why so: over the window in which a
chunk of samples is taken, the CPU time the kernel charged to the CPUs this process may
run on (`/proc/stat`, steal and interrupts included), minus this process's own CPU time,
is the work of *other* processes, in cores. That reads 0.0 on a quiet machine and 1.0 or
2.0 with one or two busy-loop processes, exactly. It is compared with what the measurement
leaves free (CPUs minus its threads) plus a margin and the error of tick-based
accounting. The alternatives were measured on the same machine and rejected:
`/proc/loadavg` is a one-minute average that had not moved a second after the load
began; a calibration kernel (SHA-256 on two threads, a few ms, its idle time the minimum
of its runs) spread from 1.0x to 1.7x its idle time on a quiet machine (90th
percentile), read 1.7x-1.9x right after a TVM or ONNX Runtime chunk because their own
pool threads still spin, and missed one busy process when its idle time was taken under
load: too unreliable to gate on.

What `collect_samples` does with it: samples are taken in chunks of about a quarter
second. A chunk taken while other processes used more than the limit is discarded, the
probe waits for the machine to become quiet, and the chunk is taken again, within the
sweep's budget (`budgets.noise_retries` re-takes, `budgets.noise_budget_s` seconds of
waiting and re-taking per point). What is still taken under load when the budget is spent
is kept and counted (`loaded_samples`), which flags the row noisy. Sessions without a
probe (a board over RPC, whose load this machine cannot see) or whose device is not the
CPU (a GPU) instead re-take the whole measurement when its coefficient of variation
exceeds `budgets.cv_threshold`, within the same budget, and keep the least dispersed set;
every set's median and CV is recorded.

Both the TVM path (`time_vm`) and the baseline path (`time_peer`) collect through here,
so a TVM variant and the runtime it is compared with are held to the same standard.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Seconds of samples a chunk aims for: long enough for the load reading to resolve
#: (accounting is in clock ticks), short enough that a discarded chunk costs little.
CHUNK_TARGET_S = 0.25
#: A load reading covers at least this long (a shorter chunk is padded by waiting).
MIN_WINDOW_S = 0.1
#: Other processes may use this many cores beyond what the measurement leaves free
#: before the machine counts as busy (daemons, the console, the kernel's own work).
MARGIN_CORES = 0.25
#: How long one poll lasts while waiting for a busy machine to become quiet.
POLL_S = 0.25
#: First pause before re-taking a dispersed measurement on a session without a probe;
#: it doubles with each re-take.
BACKOFF_S = 0.5

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


@dataclass(frozen=True)
class NoisePolicy:
    """How hard the measure stage tries for quiet samples (from the sweep's budgets)."""

    #: Re-takes allowed per point (of a chunk taken under load, or of a dispersed set).
    retries: int = 5
    #: Seconds per point allowed for waiting and re-taking, beyond the first measurement.
    budget_s: float = 20.0
    #: Coefficient of variation above which a measurement is dispersed.
    cv_threshold: float = 0.05
    #: Re-take a whole dispersed measurement (sessions without a load probe).
    retake_on_cv: bool = False

    @classmethod
    def from_budgets(cls, budgets: Any, *, retake_on_cv: bool) -> NoisePolicy:
        return cls(retries=budgets.noise_retries, budget_s=budgets.noise_budget_s,
                   cv_threshold=budgets.cv_threshold, retake_on_cv=retake_on_cv)


@dataclass
class Sampling:
    """The samples kept and how they were obtained (what the row's noise columns show)."""

    samples_s: list[float]
    #: Chunks or whole sets re-taken because of load or dispersion.
    retries: int = 0
    #: Samples kept although the probe saw the machine busy (the budget was spent).
    loaded_samples: int = 0
    #: The highest load any kept chunk was taken under (None without a probe).
    other_cores_max: float | None = None
    waited_s: float = 0.0
    #: Seconds spent beyond the first measurement (waiting plus discarded samples).
    extra_s: float = 0.0
    probe: dict[str, Any] | None = None
    policy: NoisePolicy = field(default_factory=NoisePolicy)
    #: Notable moments: chunks re-taken or kept under load, sets re-taken.
    events: list[dict[str, Any]] = field(default_factory=list)
    #: Median and CV of every full set taken (more than one after dispersion re-takes).
    sets: list[dict[str, float]] = field(default_factory=list)

    @property
    def samples_ms(self) -> list[float]:
        return [s * 1e3 for s in self.samples_s]

    def record(self) -> dict[str, Any]:
        """JSON-able summary, stored in the measure stage's meta and the row's noise_log."""
        return {
            "probe": self.probe,
            "retries": self.retries,
            "loaded_samples": self.loaded_samples,
            "other_cores_max": None if self.other_cores_max is None
            else round(self.other_cores_max, 3),
            "waited_s": round(self.waited_s, 3),
            "extra_s": round(self.extra_s, 3),
            "budget": {"retries": self.policy.retries, "seconds": self.policy.budget_s,
                       "retake_on_cv": self.policy.retake_on_cv},
            "events": self.events,
            "sets": self.sets,
        }


def dispersion(samples: Sequence[float]) -> float:
    """Coefficient of variation (std / mean); 0 for a single or all-zero sample."""
    arr = np.asarray(samples, dtype=np.float64)
    mean = float(arr.mean()) if arr.size else 0.0
    return float(arr.std()) / mean if mean > 0 else 0.0


def _ignore(_n: int) -> None:
    pass


def collect_samples(time_runs: Callable[[int, int], Sequence[float]], repeat: int, *,
                    warmup: int = 1, policy: NoisePolicy | None = None,
                    probe: CpuLoadProbe | None = None,
                    advance: Callable[[int], None] = _ignore,
                    say: Callable[[str], None] | None = None,
                    clock: Callable[[], float] = time.perf_counter,
                    sleep: Callable[[float], None] = time.sleep,
                    name_busy: Callable[[], list[str]] | None = busiest_processes) -> Sampling:
    """`repeat` timing samples (seconds) taken in chunks, re-taken while the machine is
    busy (see the module doc). The one sample loop of the TVM and baseline paths.

    `time_runs(n, warmup)` times `n` samples after `warmup` discarded runs; it is given the
    sweep's warm-up for the first chunk and again after every pause (caches and thread
    pools go cold while waiting), else 0. `advance(n)` reports kept samples to a progress
    bar; `say` gets one line per wait or give-up. `name_busy` names the processes that
    keep the machine busy (once per point, in the first message).
    """
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    policy = policy or NoisePolicy()
    out = Sampling(samples_s=[], probe=probe.describe() if probe else None, policy=policy)
    state = {"named": False}

    def budget_left() -> float:
        return policy.budget_s - out.extra_s

    def tell(text: str) -> None:
        if say is not None:
            say(text)

    def busy_names() -> str:
        if state["named"] or name_busy is None:
            return ""
        state["named"] = True
        names = name_busy()
        return f" ({', '.join(names)})" if names else ""

    def take_set(report: Callable[[int], None]) -> list[float]:
        samples: list[float] = []
        per_sample = None  # wall seconds per sample, least seen (load only inflates it)
        warm = warmup
        while len(samples) < repeat:
            left = repeat - len(samples)
            if per_sample is None:
                n = left if left <= 25 else max(1, min(25, repeat // 10))
            else:
                n = max(1, min(left, int(CHUNK_TARGET_S / max(per_sample, 1e-9))))
            mark = probe.begin() if probe is not None else None
            start = clock()
            chunk = [float(s) for s in time_runs(n, warm)]
            took = clock() - start
            per_sample = took / n if per_sample is None else min(per_sample, took / n)
            warm = 0
            reading = probe.end(mark) if probe is not None else None
            if reading is not None and reading.loaded:
                if out.retries < policy.retries and budget_left() > 0:
                    msg = busy_names()
                    tell(f"machine busy: {reading.describe()}{msg}; waiting up to "
                         f"{budget_left():.0f} s for it to quiet down")
                    quiet, waited = probe.wait_until_quiet(budget_left())
                    out.waited_s += waited
                    out.extra_s += waited
                    event = {"sample": len(samples), "n": n, **reading.as_dict(),
                             "waited_s": round(waited, 3)}
                    if quiet is not None and not quiet.loaded:
                        out.retries += 1
                        out.extra_s += took
                        out.events.append({"event": "retaken", **event})
                        warm = warmup
                        continue  # discard the chunk, take it again
                    out.events.append({"event": "kept_loaded", **event})
                else:
                    out.events.append({"event": "kept_loaded", "sample": len(samples), "n": n,
                                       **reading.as_dict()})
                out.loaded_samples += n
                if out.loaded_samples == n:  # the first time only
                    tell(f"still busy ({reading.describe()}); the retry budget "
                         f"({policy.retries} re-takes, {policy.budget_s:g} s) is spent: "
                         "samples taken under load are kept and the point is flagged noisy")
            if reading is not None:
                out.other_cores_max = max(out.other_cores_max or 0.0, reading.other_cores)
            samples += chunk
            report(n)
        return samples

    first_start = clock()
    best = take_set(advance)
    set_s = clock() - first_start - out.extra_s
    out.sets.append({"median_ms": float(np.median(best)) * 1e3, "cv": dispersion(best)})
    backoff = BACKOFF_S
    while (policy.retake_on_cv and dispersion(best) > policy.cv_threshold
           and out.retries < policy.retries and budget_left() >= set_s + backoff):
        tell(f"timings dispersed (cv {dispersion(best):.0%} > {policy.cv_threshold:.0%}); "
             f"re-taking all {repeat} samples in {backoff:g} s")
        sleep(backoff)
        out.waited_s += backoff
        out.extra_s += backoff
        start = clock()
        again = take_set(_ignore)
        out.extra_s += clock() - start
        out.retries += 1
        cv = dispersion(again)
        out.sets.append({"median_ms": float(np.median(again)) * 1e3, "cv": cv})
        out.events.append({"event": "set_retaken", "cv_before": round(dispersion(best), 4),
                           "cv": round(cv, 4)})
        if cv < dispersion(best):
            best = again
        backoff *= 2
    out.samples_s = best
    return out
