"""The placement probe (`dlas.measure.placement`): how a round trip is labelled, which
placements may be compared, how a reading is built from bursts and CPU pairs (on a
scripted reader), building the native ping-pong, and the real ping-pong on this machine."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlas.measure import placement
from dlas.measure.placement import (
    ERRATIC,
    FAR,
    FAR_MAX_NS,
    NEAR,
    NEAR_MAX_NS,
    SINGLE,
    UNKNOWN,
    PlacementProbe,
    PlacementReading,
    build_library,
    cache_stream_ns,
    classify,
    comparable,
    probe_ns,
    probe_unavailable,
    round_trip_ns,
)

# -- labels ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ns", "state"), [
    (None, UNKNOWN), (0.0, UNKNOWN), (-1.0, UNKNOWN), (-2.0, UNKNOWN),
    (1.0, NEAR), (58.0, NEAR), (NEAR_MAX_NS, NEAR),
    (NEAR_MAX_NS + 0.001, FAR), (340.0, FAR), (FAR_MAX_NS, FAR),
    (FAR_MAX_NS + 0.001, ERRATIC), (1325.0, ERRATIC), (1e9, ERRATIC),
])
def test_classify_bands_and_boundaries(ns: float | None, state: str) -> None:
    """Near up to and including 200 ns, far up to and including 1000 ns, erratic above;
    no reading or a failure code (<= 0) is unknown."""
    assert classify(ns) == state


def test_comparable_only_within_one_placement_or_against_a_single_cpu() -> None:
    assert comparable(NEAR, NEAR) and comparable(FAR, FAR)
    assert not comparable(NEAR, FAR) and not comparable(FAR, NEAR)
    assert not comparable(NEAR, UNKNOWN) and not comparable(NEAR, None)
    for state in (NEAR, FAR, UNKNOWN, ERRATIC, None):
        assert comparable(SINGLE, state) and comparable(state, SINGLE)


# -- the probe on a scripted reader ------------------------------------------------------------


def scripted(values: dict[int, list[float | None]]
             ) -> tuple[Callable[[int, int], float | None], list[tuple[int, int]]]:
    """A reader returning, for each partner CPU, its values in order; and its calls."""
    calls: list[tuple[int, int]] = []
    left = {cpu: list(v) for cpu, v in values.items()}

    def read(a: int, b: int) -> float | None:
        calls.append((a, b))
        return left[b].pop(0)

    return read, calls


def test_a_reading_is_the_median_of_its_bursts() -> None:
    """One disturbed burst (a preempted vCPU) out of three does not decide the label."""
    read, calls = scripted({1: [80.0, 5000.0, 120.0]})
    r = PlacementProbe([0, 1], bursts=3, reader=read).read()
    assert r == PlacementReading(NEAR, 120.0)
    assert calls == [(0, 1)] * 3


def test_a_reading_is_the_worst_pair_from_the_first_cpu() -> None:
    """CPUs 2, 0, 3: every pair is measured from the first listed CPU (where the master
    thread runs), and the slowest pair decides: one far partner makes the placement far."""
    read, calls = scripted({0: [90.0, 100.0, 110.0], 3: [300.0, 350.0, 400.0]})
    r = PlacementProbe([2, 0, 3], bursts=3, reader=read).read()
    assert r.state == FAR and r.round_trip_ns == 350.0
    assert calls == [(2, 0)] * 3 + [(2, 3)] * 3


def test_bursts_that_fail_are_ignored_and_a_pair_without_any_is_unknown() -> None:
    read, _ = scripted({1: [None, 100.0, 140.0]})
    assert PlacementProbe([0, 1], bursts=3, reader=read).read() == \
        PlacementReading(NEAR, 120.0)
    assert PlacementProbe([0, 1, 2], bursts=2, reader=lambda a, b: None).read() == \
        PlacementReading(UNKNOWN)
    read, _ = scripted({1: [90.0, 90.0], 2: [None, None]})
    assert PlacementProbe([0, 1, 2], bursts=2, reader=read).read().state == UNKNOWN


def test_slow_bursts_read_erratic() -> None:
    read, _ = scripted({1: [1500.0, 2000.0, 900.0]})
    assert PlacementProbe([0, 1], bursts=3, reader=read).read() == \
        PlacementReading(ERRATIC, 1500.0)


def test_one_cpu_is_single_and_never_probed() -> None:
    def never(a: int, b: int) -> float:
        raise AssertionError("a single CPU has nothing to probe")

    assert PlacementProbe([3], reader=never).read() == PlacementReading(SINGLE)
    assert PlacementProbe([], reader=never).read().state == SINGLE


def test_at_least_one_burst_and_describe() -> None:
    read, calls = scripted({1: [60.0]})
    probe = PlacementProbe([0, 1], bursts=0, reader=read)
    assert probe.read().state == NEAR and len(calls) == 1
    d = probe.describe()
    assert d["cpus"] == [0, 1] and d["near_max_ns"] == NEAR_MAX_NS
    assert d["far_max_ns"] == FAR_MAX_NS


# -- building the native probe -----------------------------------------------------------------


needs_compiler = pytest.mark.skipif(placement._compiler() is None, reason="no C compiler")


@needs_compiler
def test_build_library_compiles_once_per_source(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The library is named by the source's digest; a second build finds it and does not
    need a compiler; no temporary files are left beside it."""
    lib = build_library(tmp_path)
    assert lib.is_file() and lib.parent == tmp_path and lib.name.startswith("pingpong-")
    monkeypatch.setattr(placement, "_compiler", lambda: None)
    assert build_library(tmp_path) == lib
    assert sorted(p.name for p in tmp_path.iterdir()) == [lib.name]


def test_build_library_says_what_to_install_without_a_compiler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "_compiler", lambda: None)
    with pytest.raises(RuntimeError, match="no C compiler"):
        build_library(tmp_path / "lib")


def test_a_failed_build_raises_and_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`CC=false` is found on PATH and fails: the error names it, no half-written
    library remains."""
    monkeypatch.setenv("CC", "false")
    with pytest.raises(RuntimeError, match="false failed"):
        build_library(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_without_a_library_the_probe_is_unavailable_and_reads_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(out_dir: Path | None = None) -> Path:
        raise RuntimeError("no C compiler here")

    monkeypatch.setattr(placement, "_library", None)
    monkeypatch.setattr(placement, "_build_error", None)
    monkeypatch.setattr(placement, "build_library", fail)
    assert probe_unavailable() == "no C compiler here"
    assert round_trip_ns(0, 1) is None
    assert PlacementProbe([0, 1]).read() == PlacementReading(UNKNOWN)


# -- the real ping-pong on this machine --------------------------------------------------------


@pytest.fixture
def two_cpus() -> Iterator[list[int]]:
    """Two CPUs this process may run on, with the probe built; skips with the reason."""
    reason = probe_unavailable()
    if reason is not None:
        pytest.skip(f"placement probe unavailable: {reason}")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"only CPU {cpus} allowed: nothing to ping-pong between")
    yield cpus[:2]


def test_real_round_trip_is_plausible_and_restores_affinity(two_cpus: list[int]) -> None:
    """A cache-line round trip between two CPUs takes tens to hundreds of nanoseconds
    (microseconds when a vCPU is preempted); the best of three readings is within
    10 ns .. 100 us. The calling thread's CPU mask is the same afterwards."""
    mask = os.sched_getaffinity(0)
    values = [round_trip_ns(two_cpus[0], two_cpus[1]) for _ in range(3)]
    assert os.sched_getaffinity(0) == mask
    good = [v for v in values if v is not None]
    assert good, values
    assert 10.0 <= min(good) <= 100_000.0, values
    reading = PlacementProbe(two_cpus).read()
    assert reading.state in (NEAR, FAR, ERRATIC) and reading.round_trip_ns is not None


def test_real_round_trip_to_a_cpu_outside_the_mask_is_none(two_cpus: list[int]) -> None:
    """The partner cannot be pinned to a CPU that does not exist: no reading, no hang,
    and the caller's mask is restored."""
    missing = max(1000, os.cpu_count() or 0)
    mask = os.sched_getaffinity(0)
    assert round_trip_ns(two_cpus[0], missing) is None
    assert round_trip_ns(missing, two_cpus[0]) is None
    assert os.sched_getaffinity(0) == mask


def test_one_native_call_reads_the_bursts_and_both_cpus_caches(two_cpus: list[int]) -> None:
    """`probe_ns` does a whole reading's native work with one partner thread: its bursts
    are plausible round trips, each CPU's cache reading is a plausible ns/KiB (as
    `cache_stream_ns` reads it), the caller's mask is restored, and a partner that cannot
    be pinned reads nothing. `PlacementProbe.read` takes its readings from it."""
    mask = os.sched_getaffinity(0)
    trips, (a, b) = probe_ns(two_cpus[0], two_cpus[1], bursts=3)
    assert os.sched_getaffinity(0) == mask
    good = [v for v in trips if v is not None]
    assert len(trips) == 3 and good and 10.0 <= min(good) <= 100_000.0, trips
    alone = cache_stream_ns(two_cpus[1])
    assert a is not None and b is not None and alone is not None
    assert all(0.5 <= v <= 1000.0 for v in (a, b)), (a, b)
    trips, cache = probe_ns(two_cpus[0], two_cpus[1], cache_passes=0)
    assert cache == (None, None) and all(v is not None for v in trips)
    missing = max(1000, os.cpu_count() or 0)
    assert probe_ns(two_cpus[0], missing) == ([None] * 3, (None, None))
    assert os.sched_getaffinity(0) == mask
    reading = PlacementProbe(two_cpus).read()
    assert len(reading.cache_ns) == 2 and all(v is not None for v in reading.cache_ns)
