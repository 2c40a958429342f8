"""Timing on a busy machine (`dlas.measure.sampling`): the probe's arithmetic on forced
inputs, the sample loop's re-takes and give-ups on scripted readings, and real busy-loop
processes on this machine's CPUs noticed, waited out, or flagged."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence

import psutil
import pytest

from dlas.measure.sampling import (
    TICK_S,
    CpuLoadProbe,
    LoadReading,
    NoisePolicy,
    collect_samples,
    dispersion,
)
from dlas.results.store import latency_columns


class FakeClock:
    """A clock that moves only when slept on or told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


# -- the probe's arithmetic --------------------------------------------------------------------


def test_probe_counts_other_processes_cpu_against_what_the_measurement_leaves_free() -> None:
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
    assert busy.limit_cores == pytest.approx(0.25 + 3 * TICK_S / 0.5)

    # a 1-thread measurement leaves one CPU free: one other busy core does not disturb it
    one = CpuLoadProbe(1, cpus=[0, 1], reader=reader, clock=clock, sleep=clock.sleep)
    mark = one.begin()
    clock.now += 0.5
    state["busy"] += 0.5
    assert not one.end(mark).loaded

    # hypervisor steal is load too, and is said so
    mark = probe.begin()
    clock.now += 0.5
    state["busy"] += 0.5
    state["steal"] += 0.5
    stolen = probe.end(mark)
    assert stolen.loaded and stolen.steal_cores == pytest.approx(1.0)
    assert "hypervisor steal" in stolen.describe()


def test_probe_pads_a_short_window_so_clock_ticks_cannot_fake_load() -> None:
    clock = FakeClock()
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=lambda c: (0.0, 0.0, 0.0), clock=clock,
                         sleep=clock.sleep, min_window_s=0.1)
    mark = probe.begin()
    clock.now += 0.01  # a 10 ms chunk
    reading = probe.end(mark)
    assert reading.window_s == pytest.approx(0.1)  # waited out to 100 ms
    # one stray tick on each CPU and one of skew stay under the limit at that window
    assert 3 * TICK_S / reading.window_s < reading.limit_cores


# -- the sample loop on scripted readings --------------------------------------------------------


def reading(cores: float) -> LoadReading:
    return LoadReading(window_s=0.25, other_cores=cores, steal_cores=0.0, limit_cores=0.5)


class ScriptedProbe:
    """Readings in order: one per chunk (`end`) and one per poll while waiting."""

    def __init__(self, chunks: list[float], polls: list[float]) -> None:
        self.chunks, self.polls = list(chunks), list(polls)
        self.waits: list[float] = []

    def begin(self) -> None:
        return None

    def end(self, _mark: object) -> LoadReading:
        return reading(self.chunks.pop(0) if self.chunks else 0.0)

    def wait_until_quiet(self, timeout_s: float) -> tuple[LoadReading | None, float]:
        self.waits.append(timeout_s)
        r = reading(self.polls.pop(0) if self.polls else 0.0)
        return r, 0.5 if not r.loaded else timeout_s

    def describe(self) -> dict:
        return {"kind": "scripted"}


def timer() -> tuple[list[tuple[int, int]], object]:
    """A `time_runs` returning 1 ms samples tagged by call, and the calls it got."""
    calls: list[tuple[int, int]] = []

    def time_runs(n: int, warmup: int) -> list[float]:
        calls.append((n, warmup))
        return [1e-3 * len(calls)] * n

    return calls, time_runs


def test_a_chunk_timed_under_load_is_waited_out_and_taken_again() -> None:
    calls, time_runs = timer()
    probe = ScriptedProbe(chunks=[2.0, 0.0], polls=[0.0])  # busy, then quiet
    advanced: list[int] = []
    said: list[str] = []
    out = collect_samples(time_runs, 20, warmup=3, probe=probe,  # type: ignore[arg-type]
                          policy=NoisePolicy(retries=3, budget_s=10), advance=advanced.append,
                          say=said.append, name_busy=lambda: ["stress[42] 2.00 cores"])
    assert out.retries == 1 and out.loaded_samples == 0
    assert calls == [(20, 3), (20, 3)]  # re-taken whole, warmed up again after the pause
    assert out.samples_s == [2e-3] * 20  # the busy chunk's samples are gone
    assert sum(advanced) == 20
    assert [e["event"] for e in out.events] == ["retaken"]
    assert out.events[0]["other_cores"] == 2.0 and out.waited_s == 0.5
    assert "machine busy" in said[0] and "stress[42]" in said[0]
    cols = latency_columns(out.samples_ms, 0.05, out.record())
    assert cols.noisy == 0 and cols.load_retries == 1 and cols["loaded_samples"] == 0
    assert cols.noise_log["events"][0]["event"] == "retaken"


def test_persistent_load_spends_the_budget_then_keeps_and_flags_the_samples() -> None:
    probe = ScriptedProbe(chunks=[1.8] * 10, polls=[1.8] * 10)  # never quiet
    out = collect_samples(lambda n, warmup: [1e-3] * n, 60, warmup=1, probe=probe,  # type: ignore[arg-type]
                          policy=NoisePolicy(retries=5, budget_s=4), name_busy=None)
    assert out.loaded_samples == 60 and out.retries == 0
    assert probe.waits == [4]  # one wait, for the whole budget; none after it is spent
    assert out.other_cores_max == 1.8
    cols = latency_columns(out.samples_ms, 0.05, out.record())
    assert cols.noisy == 1 and cols.latency_cv == 0.0  # steady, yet not trusted
    assert "60 of 60 samples taken on a busy machine" in cols.noise_reason
    assert cols.load_other_cores == 1.8


def test_no_retries_means_no_waiting() -> None:
    _, time_runs = timer()
    probe = ScriptedProbe(chunks=[2.0], polls=[])
    out = collect_samples(time_runs, 5, probe=probe,  # type: ignore[arg-type]
                          policy=NoisePolicy(retries=0, budget_s=10), name_busy=None)
    assert probe.waits == [] and out.loaded_samples == 5


def test_without_a_probe_a_dispersed_set_is_taken_again_and_the_steadier_kept() -> None:
    clock = FakeClock()
    first, second = [1e-3, 5e-3] * 10, [1e-3, 1.01e-3] * 10
    taken = iter([first, second])  # each set is one chunk (20 samples <= 25)

    def time_runs(n: int, warmup: int) -> list[float]:
        clock.now += 0.01
        return next(taken)[:n]

    out = collect_samples(time_runs, 20, policy=NoisePolicy(retries=3, budget_s=30,
                                                            cv_threshold=0.05,
                                                            retake_on_cv=True),
                          clock=clock, sleep=clock.sleep)
    assert out.retries == 1 and len(out.sets) == 2
    assert out.sets[0]["cv"] > 0.5 and out.sets[1]["cv"] < 0.01
    assert out.samples_s == second and dispersion(out.samples_s) < 0.05
    assert out.events[-1]["event"] == "set_retaken"


def test_dispersion_retakes_stop_at_the_budget() -> None:
    clock = FakeClock()

    def time_runs(n: int, warmup: int) -> list[float]:
        clock.now += 1.0  # each set takes 1 s
        return [1e-3, 3e-3] * (n // 2) + [1e-3] * (n % 2)

    out = collect_samples(time_runs, 10, policy=NoisePolicy(retries=10, budget_s=5,
                                                            retake_on_cv=True),
                          clock=clock, sleep=clock.sleep)
    assert 1 <= out.retries < 10 and out.extra_s <= 5
    assert latency_columns(out.samples_ms, 0.05, out.record())["noisy"] == 1


def test_chunks_grow_to_a_quarter_second_and_repeat_is_exact() -> None:
    calls, time_runs = timer()
    out = collect_samples(time_runs, 150, policy=NoisePolicy(), name_busy=None)
    assert len(out.samples_s) == 150 and calls[0][0] == 15  # a tenth first, as before
    assert sum(n for n, _ in calls) == 150 and len(calls) == 2  # then the rest at once
    with pytest.raises(ValueError):
        collect_samples(time_runs, 0)


# -- real load on this machine ---------------------------------------------------------------


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


def cheap_call(n: int, warmup: int) -> list[float]:
    """About 0.2 ms of Python per sample: something to time."""
    out = []
    for _ in range(warmup):
        sum(range(2000))
    for _ in range(n):
        start = time.perf_counter()
        sum(range(2000))
        out.append(time.perf_counter() - start)
    return out


def test_this_machines_probe_notices_two_busy_loops(two_busy_loops: list) -> None:
    """The production reader (/proc/stat less this process) on the real CPUs: two
    busy-loop processes read as about two other cores, far over the limit of a 2-thread
    measurement. (Only the loaded side is asserted: other suites may share this machine.)"""
    probe = CpuLoadProbe(2)
    mark = probe.begin()
    cheap_call(500, 0)
    r = probe.end(mark)
    assert r.loaded and r.other_cores >= min(1.0, len(probe.cpus) - 0.5), r


def children_reader(procs: list[subprocess.Popen]):  # noqa: ANN201
    """A reader that counts only `procs`' CPU time as the machine's load: the retry test
    then depends on the load it makes, not on what else shares this machine (which may
    also leave the busy loops less than a core each, hence no margin in these probes)."""

    def read(_cpus: Sequence[int]) -> tuple[float, float, float]:
        total = 0.0
        for p in procs:
            try:
                total += sum(psutil.Process(p.pid).cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return total, 0.0, 0.0

    return read


def test_real_load_is_waited_out_and_the_retake_is_clean(two_busy_loops: list) -> None:
    """Two real busy loops while a cheap call is timed; they stop 0.5 s later. The chunk
    taken under them is discarded, the probe waits, and the samples kept are quiet."""
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=children_reader(two_busy_loops),
                         margin_cores=0.0, min_window_s=0.25)
    threading.Timer(0.5, stop, args=(two_busy_loops,)).start()
    out = collect_samples(cheap_call, 30, probe=probe, name_busy=None,
                          policy=NoisePolicy(retries=3, budget_s=5))
    assert out.retries >= 1 and out.loaded_samples == 0, out.record()
    assert out.events[0]["event"] == "retaken"
    assert out.events[0]["other_cores"] > out.events[0]["limit_cores"]
    assert out.waited_s < 4 and len(out.samples_s) == 30
    cols = latency_columns(out.samples_ms, 10.0, out.record())  # cv aside: load decides
    assert cols.noisy == 0 and cols.load_retries == out.retries


def test_real_load_that_outlasts_the_budget_is_flagged(two_busy_loops: list) -> None:
    probe = CpuLoadProbe(2, cpus=[0, 1], reader=children_reader(two_busy_loops),
                         margin_cores=0.0, min_window_s=0.25)
    start = time.perf_counter()
    out = collect_samples(cheap_call, 30, probe=probe, name_busy=None,
                          policy=NoisePolicy(retries=2, budget_s=0.6))
    assert time.perf_counter() - start < 3
    assert out.loaded_samples == 30 and out.other_cores_max > probe.limit(0.25)
    cols = latency_columns(out.samples_ms, 10.0, out.record())
    assert cols.noisy == 1 and "busy machine" in cols.noise_reason
