"""The machine's measured limits (`dlas.profile.limits`) and the roofline over them.

Measured on whatever machine runs the suite, with one thread (a few seconds): the peak
stays under the CPU table's bound, the levels' bandwidths are sane, the kernels compute
what they should. The CPU table itself is driven with forced flags and families, so the
AVX2 Zen 3, AVX-512 Zen 4 and Zen 5 paths are checked on any CPU. The roofline and the
cache are checked on synthetic limits, where every number is known.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from dlas.profile import host_facts
from dlas.profile import limit_kernels as kern
from dlas.profile import limits as lim
from dlas.profile.cpu_table import core_features, theoretical_peak
from dlas.profile.limits import MachineLimits
from dlas.profile.roofline import Roof, attainable, over_roof, place_layers
from dlas.results.layer_profile import LayerTime
from dlas.targets import host as targets_host

ZEN3_FLAGS = ["sse2", "avx", "avx2", "fma"]
ZEN4_FLAGS = [*ZEN3_FLAGS, "avx512f", "avx512bw", "avx512_vnni"]
ZEN5_FLAGS = [*ZEN4_FLAGS, "avx_vnni"]
AMD = "AuthenticAMD"
INTEL = "GenuineIntel"


# ----------------------------------------------------------------------------- measured


@pytest.fixture(scope="module")
def host_target() -> dict:
    from dlas.targets.host import host_target as make

    return make(1)


@pytest.fixture(scope="module")
def measured(host_target: dict) -> tuple[MachineLimits, set[int], set[int]]:
    """The limits on one thread, with the calling thread's CPU set before and after."""
    before = os.sched_getaffinity(0)
    limits = lim.measure_limits(host_target, 1, None)
    return limits, before, os.sched_getaffinity(0)


def _table_core_is_this_silicon() -> bool:
    """False under DLAS_CPUINFO naming another core: the CPU table's peak then describes
    that core (a Zen 1's 128-bit datapath), while the kernels run on this one."""
    seen, real = targets_host.cpuinfo_fields(), targets_host.machine_cpuinfo_fields()
    return all(seen.get(k) == real.get(k) for k in ("vendor_id", "cpu family", "model"))


def test_peak_is_positive_and_under_theoretical(measured) -> None:
    limits, _, _ = measured
    peak = limits.peak_gflops["float32"]
    assert peak > 0
    if not _table_core_is_this_silicon():
        pytest.skip("DLAS_CPUINFO names another core: its theoretical peak is not this "
                    f"machine's (measured {peak:.0f} GFLOP/s, {limits.theoretical_basis})")
    assert peak <= limits.theoretical_gflops["float32"] * lim.THEORETICAL_SLACK, (
        limits.theoretical_basis, limits.clock_ghz)
    assert not [n for n in limits.notes if "not exact" in n or "theoretical" in n]


def test_int8_peak_where_the_target_has_vnni(measured, host_target: dict) -> None:
    from dlas.compiler.build import make_target

    limits, _, _ = measured
    if host_facts.target_has(make_target(host_target), "avx512vnni"):
        assert limits.peak_gflops["int8"] > limits.peak_gflops["float32"]
        assert limits.peak_gflops["int8"] <= (limits.theoretical_gflops["int8"]
                                              * lim.THEORETICAL_SLACK)
    else:
        assert "int8" not in limits.peak_gflops
        assert any("int8 peak not measured" in n for n in limits.notes)


def test_bandwidth_levels(measured) -> None:
    limits, _, _ = measured
    assert set(limits.bandwidth_gbs) == {"L1", "L2", "L3", "DRAM"} & set(limits.level_bytes)
    assert all(v > 0 for v in limits.bandwidth_gbs.values())
    assert limits.bandwidth_gbs["L1"] >= limits.bandwidth_gbs["DRAM"]
    assert limits.bandwidth_bytes["DRAM"] >= lim.DRAM_MIN_BYTES - 4096
    assert limits.level_bytes["DRAM"] > limits.level_bytes["L1"]


def test_record_and_process_state(measured) -> None:
    from dlas.results.environment import machine_fingerprint

    limits, before, after = measured
    assert limits.threads == 1 and len(limits.cpus) == 1 and limits.placement == "single"
    assert 0 < limits.seconds < 20
    assert limits.machine == machine_fingerprint()
    assert limits.clock_ghz["measured"] > 0
    assert after == before  # the calling thread's CPU set is given back
    MachineLimits.model_validate_json(limits.model_dump_json())


def test_fma_kernel_output_is_exact(host_target: dict) -> None:
    from dlas.compiler.build import make_target

    target = make_target(host_target)
    lanes = kern.simd_bits(target) // 32
    module = kern.compile_kernel(kern.fma_kernel(1, kern.FMA_CHAINS, lanes), "fma", target)
    x = np.arange(kern.FMA_CHAINS * lanes, dtype="float32").reshape(1, kern.FMA_CHAINS, lanes)
    y = kern._tensor(np.zeros_like(x))
    module["fma"](kern._tensor(x), y, 1.0, 2.0**-8, 1000)
    assert np.array_equal(y.numpy(), x + np.float32(1000 * 2.0**-8))
    assert np.array_equal(kern.fma_expected(x, 1000, 2.0**-8), x + np.float32(1000 / 256))


def test_vnni_expected_wraps_like_int32() -> None:
    x = np.array([0, 2**31 - 9], dtype="int32")
    assert kern.vnni_expected(x, 1).tolist() == [9, -(2**31)]


def test_simd_bits_follow_the_target_not_llvm_width() -> None:
    from dlas.compiler.build import make_target

    assert kern.simd_bits(make_target({"kind": "llvm", "mcpu": "znver3"})) == 256
    assert kern.simd_bits(make_target({"kind": "llvm", "mcpu": "znver4"})) == 512


# ----------------------------------------------------------------------------- the table


@pytest.mark.parametrize(("flags", "vendor", "family", "model", "fp32", "int8", "lanes"), [
    (ZEN3_FLAGS, AMD, 25, 0x21, 32, None, 8),        # Zen 3: AVX2, 2 x 256-bit FMA
    (ZEN4_FLAGS, AMD, 25, 0x11, 32, 128, 8),         # Zen 4: AVX-512 on 2 x 256-bit pipes
    (ZEN5_FLAGS, AMD, 26, 0x02, 64, 256, 16),        # Zen 5 server: 2 x 512-bit pipes
    (ZEN5_FLAGS, AMD, 26, 0x24, 32, 128, 8),         # Zen 5 mobile: 256-bit pipes
    (ZEN3_FLAGS, AMD, 23, 0x31, 32, None, 8),        # Zen 2
    (ZEN3_FLAGS, AMD, 23, 0x01, 16, None, 4),        # Zen 1: 128-bit pipes
    (ZEN3_FLAGS, INTEL, 6, 0x9E, 32, None, 8),       # Coffee Lake (the paper's i7-8700)
    (ZEN4_FLAGS, INTEL, 6, 0x55, 64, 256, 16),       # Cascade Lake: 2 x 512-bit FMA
    (ZEN4_FLAGS, INTEL, 6, 0x7E, 32, 128, 16),       # Ice Lake client: one 512-bit FMA
    (["sse2", "avx"], INTEL, 6, 0x2A, 16, None, 8),  # Sandy Bridge: mul + add, no FMA
])
def test_core_features_table(flags, vendor, family, model, fp32, int8, lanes) -> None:
    features = core_features(flags, vendor, family, model)
    assert features.ops_per_cycle("float32") == fp32
    assert features.ops_per_cycle("int8") == int8
    assert features.fp32_lanes == lanes


def test_theoretical_peak_zen4_vs_zen5() -> None:
    zen4, basis4 = theoretical_peak(core_features(ZEN4_FLAGS, AMD, 25, 0x11), 2, 3.0)
    zen5, basis5 = theoretical_peak(core_features(ZEN5_FLAGS, AMD, 26, 0x02), 2, 3.0, "x")
    zen3, basis3 = theoretical_peak(core_features(ZEN3_FLAGS, AMD, 25, 0x21), 2, 3.0)
    assert zen3 == {"float32": 192.0}
    assert zen4 == {"float32": 192.0, "int8": 768.0}
    assert zen5 == {"float32": 384.0, "int8": 1536.0}
    assert basis3.startswith("2 cores x 8 fp32 lanes (AVX2, 256-bit datapath) x 2 FMA units")
    assert "AVX-512, 256-bit datapath" in basis4 and "Zen 4" in basis4
    assert "16 fp32 lanes (AVX-512, 512-bit datapath)" in basis5 and "3.00 GHz (x)" in basis5


def test_a_zen4_without_avx512_is_named_by_its_model() -> None:
    """A hypervisor that hides AVX-512 (or an AVX2 target) leaves a Zen 4 the same two
    256-bit pipes as a Zen 3; its name still says Zen 4."""
    hidden = core_features(ZEN3_FLAGS, AMD, 25, 0x11)
    assert hidden.name.startswith("AMD Zen 4") and "AVX-512 not used" in hidden.name
    assert hidden.isa == "AVX2" and hidden.ops_per_cycle("float32") == 32
    assert core_features(ZEN3_FLAGS, AMD, 25, 0x01).name.startswith("AMD Zen 3")
    assert core_features(ZEN4_FLAGS, AMD, 25, 0x11).name == "AMD Zen 4 (family 25, model 0x11)"


def test_target_without_avx512_caps_the_table() -> None:
    # A Zen 5 running code built for AVX2 (mcpu znver3): 256-bit ops on 512-bit pipes.
    features = core_features([f for f in ZEN5_FLAGS if not f.startswith("avx512")], AMD, 26, 2)
    assert features.isa == "AVX2" and features.ops_per_cycle("float32") == 32


def test_choose_clock_prefers_a_plausible_measurement() -> None:
    notes: list[str] = []
    assert lim.choose_clock(4.5, {"cpuinfo": 2.6}, notes)[0] == 4.5
    assert lim.choose_clock(40.0, {"cpuinfo": 2.6, "cpufreq_max": 3.7}, notes) == (
        3.7, "cpufreq_max")
    assert lim.choose_clock(None, {"cpuinfo": 2.6}, notes) == (2.6, "cpuinfo")
    assert any("implausible" in n for n in notes)


def test_sysfs_parsers_and_working_sets() -> None:
    assert host_facts.parse_size("48K") == 48 << 10 and host_facts.parse_size("32M") == 32 << 20
    assert host_facts.parse_cpu_list("0-2,5\n") == {0, 1, 2, 5}
    sizes = {"L1": 48 << 10, "L2": 1 << 20, "L3": 32 << 20, "DRAM": 1 << 34}
    sets = lim.working_sets(sizes, ["L1", "L2"], 2, [])
    assert sets == {"L1": 48 << 10, "L2": 1 << 20, "L3": 16 << 20, "DRAM": 256 << 20}


# ----------------------------------------------------------------------------- roofline


def synthetic(**update) -> MachineLimits:
    fields = dict(
        tvm_target={"kind": "llvm"}, threads=2, cpus=[0, 1],
        peak_gflops={"float32": 100.0}, theoretical_gflops={"float32": 110.0},
        theoretical_basis="test", bandwidth_gbs={"L1": 1000.0, "L2": 400.0, "L3": 200.0,
                                                 "DRAM": 50.0},
        level_bytes={"L1": 32 << 10, "L2": 1 << 20, "L3": 16 << 20, "DRAM": 1 << 34},
        private_levels=["L1", "L2"], measured_at=0.0, seconds=1.0, machine={})
    fields.update(update)
    return MachineLimits(**fields)


def test_attainable_memory_bound_at_low_intensity() -> None:
    assert attainable(synthetic(), 0.1, 1 << 30) == Roof(5.0, "DRAM", "memory")


def test_attainable_compute_bound_at_high_intensity() -> None:
    assert attainable(synthetic(), 100.0, 1 << 30) == Roof(100.0, "DRAM", "compute")


@pytest.mark.parametrize(("working_set", "level"), [
    (40 << 10, "L1"), (64 << 10, "L1"),         # private: 2 threads x 32 KiB
    ((64 << 10) + 1, "L2"), (2 << 20, "L2"),    # 2 x 1 MiB
    (3 << 20, "L3"), (16 << 20, "L3"),          # shared: one 16 MiB
    ((16 << 20) + 1, "DRAM"),
])
def test_attainable_picks_the_level_by_working_set(working_set: int, level: str) -> None:
    roof = attainable(synthetic(), 0.01, working_set)
    assert roof.level == level
    assert roof.gflops == pytest.approx(0.01 * synthetic().bandwidth_gbs[level])


def test_attainable_int8_uses_its_peak_or_float32s() -> None:
    assert attainable(synthetic(), 1e6, 1, "int8").gflops == 100.0
    with_int8 = synthetic(peak_gflops={"float32": 100.0, "int8": 400.0})
    assert attainable(with_int8, 1e6, 1, "int8").gflops == 400.0
    assert attainable(with_int8, 1e6, 1, "uint8").gflops == 400.0


def _layer(index: int, **fields) -> LayerTime:
    return LayerTime(index=index, name=f"k{index}", op="conv2d", **fields)


def test_place_layers_fills_the_roofline_fields() -> None:
    memory = _layer(0, flops=1e5, bytes=10**6, time_us=10.0, calls=2)  # 0.1 FLOP/B in L2
    above = _layer(1, flops=2e6, bytes=10**5, time_us=10.0)            # 200 > peak 100
    bare = _layer(2, time_us=20.0)                                     # no flops/bytes
    layers = [memory, above, bare]
    placed = place_layers(layers, synthetic())
    low, high, none = placed
    assert low.intensity == pytest.approx(0.1) and low.gflops == pytest.approx(10.0)
    assert (low.roof_level, low.bound) == ("L2", "memory")
    assert low.roof_gflops == pytest.approx(40.0)
    assert low.roof_fraction == low.gflops / low.roof_gflops == pytest.approx(0.25)
    assert (high.bound, high.roof_gflops) == ("compute", 100.0)
    assert high.roof_fraction == pytest.approx(2.0)  # kept as measured, not clamped
    assert none.intensity is none.gflops is none.roof_gflops is none.roof_fraction is None
    assert [p.share for p in placed] == pytest.approx([0.4, 0.2, 0.4])  # time_us x calls
    assert over_roof(placed) == [high]
    assert memory.roof_fraction is None  # the input is not changed


# ----------------------------------------------------------------------------- cache


def test_cached_limits_reads_back_without_measuring(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []

    def fake(tvm_target: dict, threads: int, cpus: list[int] | None) -> MachineLimits:
        calls.append(threads)
        return synthetic(threads=threads, seconds=float(len(calls)))

    monkeypatch.setattr(lim, "measure_limits", fake)
    target = {"kind": "llvm", "mcpu": "znver4"}
    first = lim.cached_limits(tmp_path, target, 2, None)
    again = lim.cached_limits(tmp_path, target, 2, None)
    assert calls == [2] and again == first
    files = list((tmp_path / "limits").iterdir())
    assert [f.suffix for f in files] == [".json"]  # no temporary file left behind
    assert lim.cached_limits(tmp_path, target, 2, None, refresh=True).seconds == 2.0
    lim.cached_limits(tmp_path, target, 1, None)  # other threads: another entry
    assert calls == [2, 2, 1] and len(list((tmp_path / "limits").iterdir())) == 2
    files[0].write_text("{not json")
    assert lim.cached_limits(tmp_path, target, 2, None).seconds == 4.0  # re-measured


def test_a_target_this_cpu_cannot_run_is_refused(monkeypatch) -> None:
    from dlas.compiler.build import make_target
    from dlas.targets.host import X86_FEATURE_FLAGS, llvm_cpu_features

    zen3 = [X86_FEATURE_FLAGS[f] for f in llvm_cpu_features("znver3") if f in X86_FEATURE_FLAGS]
    monkeypatch.setattr(targets_host, "cpuinfo_fields", lambda: {"flags": " ".join(zen3)})
    with pytest.raises(ValueError, match="avx512f"):
        host_facts.check_runs_here(make_target({"kind": "llvm", "mcpu": "znver4"}))
    host_facts.check_runs_here(make_target({"kind": "llvm", "mcpu": "znver3"}))


def test_parallel_clock_waits_then_notes_threads_sharing_a_cpu(monkeypatch) -> None:
    readings = {1: [4.0], 2: [2.0, 2.1, 3.9]}  # 2 threads share a CPU, then do not
    monkeypatch.setattr(lim, "measure_clock", lambda target, n: readings[n].pop(0))
    monkeypatch.setattr(lim, "PARALLEL_WAIT_S", 0.0)
    notes: list[str] = []
    assert lim.parallel_clock(None, 2, notes) == 3.9 and notes == []
    readings.update({1: [4.0], 2: [2.0] * (lim.PARALLEL_TRIES + 1)})
    assert lim.parallel_clock(None, 2, notes) == 2.0
    assert any("did not run in parallel" in n for n in notes)


def test_thread_pool_refuses_a_pool_that_cannot_grow(monkeypatch) -> None:
    import dlas.measure.vm_timing as timing

    sizes: list[int] = []

    def stuck(n: int, pin: list[int] | None = None) -> int:
        sizes.append(n)
        return 1

    monkeypatch.setattr(timing, "set_num_threads", stuck)
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError, match="TVM_NUM_THREADS"), lim.thread_pool(2, None):
        pass
    assert os.sched_getaffinity(0) == before and sizes[0] == 2
