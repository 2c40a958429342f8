"""The kernels that measure the machine's limits, built with TVM, and one reading of each.

Every figure comes from a kernel compiled by `tvm.compile` for the target and timed with
TVM's time evaluator (the minimum over `REPEATS` repeats of at least `MIN_REPEAT_MS`
each), so it is what code TVM and LLVM generate for the target reach on this machine
(why that and not a datasheet: `dlas.profile.limits`):

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
  (`dlas.profile.limits.working_sets`). Bytes counted as STREAM does: 3 x 4 bytes per
  float32 element (read b, read c, write a); the write-allocate read of `a` is *not*
  counted, so where stores miss the cache (L3, DRAM) the bus moves up to 4/3 of the
  counted bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
#: Time evaluator: min over REPEATS repeats, each at least MIN_REPEAT_MS of calls.
REPEATS = 3
MIN_REPEAT_MS = 50
#: Triad bytes per call for cache levels (passes over the working set in one call), so a
#: call lasts well over the parallel launch's cost even for an L1-sized working set.
TRIAD_CALL_BYTES = 256 << 20
#: Bytes per element of a float32 triad (read b, read c, write a).
TRIAD_BYTES_PER_ELEMENT = 12


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
# One reading of each kernel (on the thread pool as the caller set it up).


def measure_clock(target: Any, threads: int) -> float:
    """GHz of the slowest of `threads` threads running the dependent integer chain."""
    module = compile_kernel(clock_kernel(threads), "clock", target)
    x = _tensor(np.zeros((threads, 16), "int32"))
    seconds = best_seconds(module, "clock", x, 0x5A5A5A5A, 7, CLOCK_ITERS)
    return CLOCK_CYCLES_PER_ITER * CLOCK_ITERS / seconds / 1e9


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

