"""The load probe (`dlas.measure.load`): its arithmetic on forced CPU-time readings,
waiting for a quiet machine on a fake clock, and real busy-loop processes on this
machine's CPUs noticed, named and waited out. (How the sampler reacts to a busy round is
in tests/test_rounds.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import psutil
import pytest

from dlas.measure.load import (
    MARGIN_CORES,
    POLL_S,
    TICK_S,
    CpuLoadProbe,
    CpuSnapshot,
    LoadReading,
    busiest_processes,
    read_cpu_times,
)

Reader = Callable[[Sequence[int]], tuple[float, float, float]]


class FakeClock:
    """A clock that moves only when slept on or told to."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def load_until(clock: FakeClock, stop_at: float, cores: float = 2.0) -> Reader:
    """A reader of a machine on which others use `cores` cores until `stop_at` seconds,
    then nothing: busy CPU seconds are the integral of that over the fake clock."""

    def read(_cpus: Sequence[int]) -> tuple[float, float, float]:
        return cores * min(clock.now, stop_at), 0.0, 0.0

    return read


# -- the probe's arithmetic --------------------------------------------------------------------


def test_probe_counts_other_processes_cpu_against_what_the_measurement_leaves_free() -> None:
    """Own CPU time is not load; someone else's is; steal is load too and is said so; a
    one-thread measurement on two CPUs tolerates one other busy core."""
    clock = FakeClock()
    state = {"busy": 0.0, "steal": 0.0, "own": 0.0}

    def reader(cpus: Sequence[int]) -> tuple[float, float, float]:
        return state["busy"], state["steal"], state["own"]

    probe = CpuLoadProbe(2, cpus=[0, 1], reader=reader, clock=clock, sleep=clock.sleep)
    assert probe.free_cores == 0
    mark = probe.begin()
    clock.now += 0.5
    state["busy"] += 1.0  # all of it this process's own threads: not load
    state["own"] += 1.0
    quiet = probe.end(mark)
    assert quiet.other_cores == 0.0 and not quiet.loaded

    mark = probe.begin()
    clock.now += 0.5
    state["busy"] += 1.5  # 1.0 s own + 0.5 s of someone else's = 1 other core
    state["own"] += 1.0
    busy = probe.end(mark)
    assert busy.other_cores == pytest.approx(1.0) and busy.loaded
    assert busy.window_s == pytest.approx(0.5)
    assert busy.limit_cores == pytest.approx(MARGIN_CORES + 3 * TICK_S / 0.5)

    one = CpuLoadProbe(1, cpus=[0, 1], reader=reader, clock=clock, sleep=clock.sleep)
    assert one.free_cores == 1
    mark = one.begin()
    clock.now += 0.5
    state["busy"] += 0.5
    assert not one.end(mark).loaded
    mark = one.begin()
    clock.now += 0.5
    state["busy"] += 1.0  # two other cores: more than the one it leaves free
    assert one.end(mark).loaded

    mark = probe.begin()
    clock.now += 0.5
    state["busy"] += 0.5
    state["steal"] += 0.5
    stolen = probe.end(mark)
    assert stolen.loaded and stolen.steal_cores == pytest.approx(1.0)
    assert "hypervisor steal" in stolen.describe()


def test_probe_pads_a_short_window_so_clock_ticks_cannot_fake_load() -> None:
    """A 10 ms chunk is padded to the 100 ms minimum window by sleeping; a stray tick on
    each CPU plus one of skew then stays under the limit."""
    clock = FakeClock()
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=lambda c: (0.0, 0.0, 0.0), clock=clock,
                         sleep=clock.sleep, min_window_s=0.1)
    mark = probe.begin()
    clock.now += 0.01
    reading = probe.end(mark)
    assert clock.slept == [pytest.approx(0.09)]
    assert reading.window_s == pytest.approx(0.1)
    assert 3 * TICK_S / reading.window_s < reading.limit_cores
    ticks = CpuLoadProbe(2, cpus=[0, 1], reader=lambda c: (3 * TICK_S, 0.0, 0.0),
                         clock=clock, sleep=clock.sleep)
    assert not ticks.end(CpuSnapshot(0.0, 0.0, 0.0, clock.now - 0.1)).loaded


def test_a_long_window_is_not_padded_and_own_time_beyond_busy_is_not_negative() -> None:
    """No sleep when the chunk already lasted the minimum; this process's time counted on
    CPUs outside the watched ones cannot make others' load negative."""
    clock = FakeClock()
    state = {"busy": 0.0, "own": 0.0}
    probe = CpuLoadProbe(2, cpus=[0], reader=lambda c: (state["busy"], 0.0, state["own"]),
                         clock=clock, sleep=clock.sleep)
    mark = probe.begin()
    clock.now += 0.3
    state["own"] += 0.6
    reading = probe.end(mark)
    assert clock.slept == [] and reading.other_cores == 0.0


def test_reading_loaded_is_strictly_above_the_limit_and_reports_itself() -> None:
    at = LoadReading(window_s=0.25, other_cores=0.5, steal_cores=0.0, limit_cores=0.5)
    over = LoadReading(window_s=0.25, other_cores=0.51, steal_cores=0.01, limit_cores=0.5)
    assert not at.loaded and over.loaded
    assert over.as_dict() == {"other_cores": 0.51, "steal_cores": 0.01,
                              "limit_cores": 0.5, "window_s": 0.25}
    assert over.describe() == "other processes used 0.51 cores (limit 0.50)"


def test_probe_watches_the_allowed_cpus_by_default() -> None:
    probe = CpuLoadProbe(1)
    assert probe.cpus == sorted(os.sched_getaffinity(0))
    assert probe.threads == 1 and CpuLoadProbe(0, cpus=[0]).threads == 1
    assert probe.describe()["cpus"] == probe.cpus


# -- waiting for quiet, on a fake clock --------------------------------------------------------


def test_wait_until_quiet_returns_the_first_quiet_poll() -> None:
    """Others stop at 1.0 s: polls of POLL_S each read busy until then, and the first
    whole window after it reads quiet."""
    clock = FakeClock()
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=load_until(clock, 1.0), clock=clock,
                         sleep=clock.sleep)
    reading, waited = probe.wait_until_quiet(10.0)
    assert reading is not None and not reading.loaded
    assert 1.0 <= waited <= 1.0 + 2 * POLL_S
    assert all(s <= POLL_S for s in clock.slept)


def test_wait_until_quiet_gives_up_at_the_timeout_with_the_last_busy_reading() -> None:
    clock = FakeClock()
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=load_until(clock, 1e9), clock=clock,
                         sleep=clock.sleep)
    reading, waited = probe.wait_until_quiet(1.0)
    assert reading is not None and reading.loaded
    assert reading.other_cores == pytest.approx(2.0)
    assert 1.0 - probe.min_window_s <= waited <= 1.0


def test_wait_until_quiet_without_time_for_a_window_reads_nothing() -> None:
    clock = FakeClock()
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=load_until(clock, 1e9), clock=clock,
                         sleep=clock.sleep)
    assert probe.wait_until_quiet(probe.min_window_s / 2) == (None, 0.0)
    assert clock.slept == []


# -- this machine ------------------------------------------------------------------------------


def busy_loops(count: int) -> list[subprocess.Popen]:
    """`count` processes spinning on the CPU, returned once they are burning it."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        used = [sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs]
        if min(used) > 0.05:
            break
        time.sleep(0.02)
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.fixture
def two_busy_loops() -> Iterator[list[subprocess.Popen]]:
    procs = busy_loops(2)
    try:
        yield procs
    finally:
        stop(procs)


def children_reader(procs: list[subprocess.Popen]) -> Reader:
    """A reader that counts only `procs`' CPU time as the machine's load: the tests then
    depend on the load they make, not on what else shares this machine (which may also
    leave the busy loops less than a core each, hence no margin in these probes)."""

    def read(_cpus: Sequence[int]) -> tuple[float, float, float]:
        total = 0.0
        for p in procs:
            try:
                total += sum(psutil.Process(p.pid).cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return total, 0.0, 0.0

    return read


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_read_cpu_times_counts_this_process_and_ignores_missing_cpus() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    busy0, steal0, own0 = read_cpu_times(cpus)
    spin(0.2)
    busy1, steal1, own1 = read_cpu_times(cpus)
    assert own1 - own0 >= 0.1  # this process's CPU time moved with its spinning
    assert busy1 - busy0 >= 0.1 and steal1 >= steal0 >= 0.0
    assert read_cpu_times([10_000])[:2] == (0.0, 0.0)


def test_this_machines_probe_notices_two_busy_loops(two_busy_loops: list) -> None:
    """The production reader (/proc/stat less this process) on the real CPUs: two
    busy-loop processes read as about two other cores, over the limit of a measurement
    using every CPU. (Only the loaded side is asserted: other suites may share this
    machine.)"""
    probe = CpuLoadProbe(len(os.sched_getaffinity(0)))
    mark = probe.begin()
    spin(0.05)
    r = probe.end(mark)
    assert r.loaded and r.other_cores >= min(1.0, len(probe.cpus) - 0.5), r


def test_busiest_processes_names_a_busy_loop(two_busy_loops: list) -> None:
    """The busy loops appear by pid with a share of a core; this process never does."""
    named = busiest_processes(0.3, top=50)
    pids = {p.pid for p in two_busy_loops}
    found = [line for line in named if int(line.split("[")[1].split("]")[0]) in pids]
    assert found, named
    assert all(line.endswith(" cores") for line in named)
    assert not any(f"[{os.getpid()}]" in line for line in named)


def test_real_load_is_waited_out(two_busy_loops: list) -> None:
    """Two real busy loops stop 0.5 s after the wait begins: the probe polls through them
    and returns quiet well before its timeout."""
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=children_reader(two_busy_loops),
                         margin_cores=0.0, min_window_s=0.25)
    mark = probe.begin()
    spin(0.05)
    assert probe.end(mark).loaded
    timer = threading.Timer(0.5, stop, args=(two_busy_loops,))
    timer.start()
    try:
        reading, waited = probe.wait_until_quiet(5.0)
    finally:
        timer.join()
    assert reading is not None and not reading.loaded
    assert 0.4 <= waited < 3.0


def test_real_load_that_outlasts_the_timeout_is_reported(two_busy_loops: list) -> None:
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=children_reader(two_busy_loops),
                         margin_cores=0.0, min_window_s=0.25)
    start = time.perf_counter()
    reading, waited = probe.wait_until_quiet(0.8)
    assert time.perf_counter() - start < 2.0
    assert reading is not None and reading.loaded
    assert reading.other_cores > probe.limit(reading.window_s)
    assert waited <= 0.8
