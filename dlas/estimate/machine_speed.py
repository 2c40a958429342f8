"""How fast this machine is, against the machine the cost model was fitted on.

The built-in training constants (`costmodel.TRAIN_S_PER_MAC_IMAGE`) were fitted on
faster CPUs than some this project runs on. On a 2-vCPU Zen 1 (AVX2, FMA on a 128-bit
datapath), 4 epochs of digits took ResNet18-w0.5 93 s and MobileNetV2-w0.5 56 s against
the model's 53 s and 49 s: the per-MAC term was 2.07x too fast, and with it scaled both
models came out within 3% (the per-layer term, framework work per conv, fitted as it
was). So the estimate times one small channels-last conv in PyTorch (a training step's
kind of work, 0.2 s) and scales the per-MAC term by the reference rate over this one.

Everything else the cost model counts (compiling: TVM's passes and LLVM; importing,
verifying, starting workers, the frameworks' per-layer work) is serial, branchy code, and
a faster core does all of it faster: on a 2-vCPU Zen 5 the quickstart took 179 s against
an estimate of 438 s (every stage 1.7-2.9x over, training's MACs already scaled), while
on the Zen 1 the constants were fitted on it took 1.0-1.09x the estimate. So a second
probe times a small pure-Python workload (dict and string work, sorting: 3.4 ms on that
Zen 5) and scales those components by its time over the reference's.
"""

from __future__ import annotations

import functools
import statistics
import time

#: The probe's rate on the machines the constants were fitted on: 2.07 x the 37.5
#: GMAC/s a 2-vCPU Zen 1 measured (2026-11-26).
REFERENCE_GMACS = 77.7
#: A probe far off (a busy machine, an odd BLAS) moves the estimate at most this much.
LIMITS = (0.25, 4.0)
#: `serial_seconds` on the machine the constants were fitted on: 2.44 x the 3.35 ms of a
#: 2-vCPU Zen 5 (2026-11-27), the factor that brought that machine's quickstart estimate
#: to its measured stage seconds; the fitted Zen 1's own probe was not taken then, so a
#: Zen 1 session should check it (its quickstart ran 1.0-1.09x the unscaled estimate).
REFERENCE_SERIAL_S = 8.2e-3
#: `compile_seconds` on the machine the constants were fitted on: fitted on a 2-vCPU Zen 4
#: (2026-11-29), whose quickstart stages ran at serial scale 0.54-0.60 (compile, import,
#: fine-tuning within 0.84-1.2x of the model there) while the build took 26-30 ms.
#: Zen 3 and Zen 5 sessions should check it (`python benchmarks/estimate.py --probes 8`).
REFERENCE_COMPILE_S = 48e-3


#: How a probe sums up its repeats: the median, not the fastest. The stages run through
#: whatever states the host's cores pass through, and on a 2-vCPU Zen 3 (2026-12-01) each
#: vCPU flipped between two speeds within milliseconds (docs/timing.md): the fastest
#: build and conv caught the fast state, and the quickstart's compile, import and training
#: stages ran 1.2-1.3x slower than the estimate predicted from them (the sweep 1.2-1.4x
#: over its estimate on three days). The median build read 1.03-1.1x the fastest there,
#: the median conv 1.07-1.15x. On a steady host the two are close; the reference
#: constants below were fitted with the fastest (Zen 1, Zen 4) and not re-fitted, so
#: there the estimate rose by what the median adds (unmeasured on those hosts).
TYPICAL = statistics.median


def conv_gmacs(seconds: float = 0.2) -> float:
    """GMAC/s of one 3x3 conv (batch 32, 32 -> 32 channels, 16x16, channels-last) in
    PyTorch with its default threads, from the median of the calls made in `seconds`
    (`TYPICAL`)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(32, 32, 16, 16, generator=generator).to(memory_format=torch.channels_last)
    w = torch.randn(32, 32, 3, 3, generator=generator).to(memory_format=torch.channels_last)
    macs = 32 * 32 * 16 * 16 * 32 * 9
    times: list[float] = []
    with torch.no_grad():
        for _ in range(3):  # warm-up: oneDNN picks and builds its kernel
            torch.nn.functional.conv2d(x, w, padding=1)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            torch.nn.functional.conv2d(x, w, padding=1)
            times.append(time.perf_counter() - start)
    return macs / TYPICAL(times) / 1e9


@functools.cache
def training_mac_scale() -> float:
    """How many times longer a training MAC takes here than the cost model assumes
    (measured once per process; 1.0 where the probe cannot run)."""
    try:
        rate = conv_gmacs()
    except Exception:  # noqa: BLE001 - no probe, no correction: the fitted constants
        return 1.0
    low, high = LIMITS
    return min(max(REFERENCE_GMACS / rate, low), high)



def training_step_seconds(seconds: float = 0.5) -> dict[str, float]:
    """Seconds of one SGD step (forward, backward, update) of a small block of the kinds
    of layers the CIFAR models train (a 3x3 conv, a depthwise conv and a 1x1 conv, each
    with batch norm and ReLU; batch 32, 32 channels, 16x16, channels-last), in float32 and
    under bfloat16 autocast as `budgets.train_precision` runs it: the fastest of each,
    taken alternately for `seconds` so that a slow spell of this host meets both."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(0)
    block = nn.Sequential(
        nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
    ).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(block.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 32, 16, 16, generator=generator).to(memory_format=torch.channels_last)
    best = {"float32": float("inf"), "bfloat16": float("inf")}

    def step(precision: str) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            loss = block(x).float().square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    for precision in best:  # warm-up: oneDNN picks and builds its kernels per precision
        for _ in range(3):
            step(precision)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for precision in best:
            start = time.perf_counter()
            step(precision)
            best[precision] = min(best[precision], time.perf_counter() - start)
    return best


@functools.cache
def bf16_step_speedup() -> float:
    """How many times faster a training step runs here in bfloat16 than in float32
    (measured once per process; 1.0 where the probe cannot run). Where the CPU lacks native
    bf16 the figure is below 1: a sweep that asks for bfloat16 there is estimated slower.

    Why a step and not the MAC probe's conv: the cost model's per-layer term moved with
    the precision as much as its per-MAC term (Zen 4, 2026-11-29: a training step of
    MobileNetV2-w0.5, whose cost is mostly per-layer work, ran 1.73x faster in bf16; of
    ResNet18-w0.5, mostly MACs, 1.48x; this probe read 1.71x), so the whole step scales."""
    try:
        best = training_step_seconds()
    except Exception:  # noqa: BLE001 - no probe, no correction: float32's constants
        return 1.0
    low, high = LIMITS
    return min(max(best["float32"] / best["bfloat16"], low), high)


def serial_seconds(seconds: float = 0.2) -> float:
    """Seconds of one small pure-Python workload (dict and string work, a sort), the
    fastest of the repeats made in `seconds`: the serial speed of this core."""
    best = float("inf")
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        table: dict[str, int] = {}
        for i in range(20000):
            key = f"k{i * 7919 % 10007}"
            table[key] = table.get(key, 0) + len(key)
        sorted(table, key=table.__getitem__)
        best = min(best, time.perf_counter() - start)
        if time.perf_counter() > end:
            return best


def compile_seconds(seconds: float = 0.3) -> float | None:
    """Seconds of an LLVM build of a small TIR function (a 64x64 matmul and a ReLU), the
    median of those made in `seconds` (`TYPICAL`): the compile stage's kind of serial
    work. None where TVM cannot build here."""
    try:
        import tvm
        from tvm import te

        n = 64
        a = te.placeholder((n, n), name="A")
        b = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), "k")
        c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="C")
        d = te.compute((n, n), lambda i, j: tvm.tirx.max(c[i, j], 0.0), name="D")
        func = te.create_prim_func([a, b, d])
        tvm.compile(func, target="llvm")  # warm-up: LLVM's first build initialises it
        times: list[float] = []
        end = time.perf_counter() + seconds
        while True:
            start = time.perf_counter()
            tvm.compile(func, target="llvm")
            times.append(time.perf_counter() - start)
            if time.perf_counter() > end:
                return TYPICAL(times)
    except Exception:  # noqa: BLE001 - no TVM build here: the Python probe alone
        return None


@functools.cache
def serial_scale() -> float:
    """How many times longer the cost model's serial work (all but training MACs) takes
    here than it assumes (measured once per process): the lower of the two probes'.

    Why two, and the lower: on a 2-vCPU Zen 4 (2026-11-29, idle) the Python probe's speed
    came in spells, 4.3-4.7 ms in some and 7-8 ms in others lasting seconds (every
    pure-Python workload tried moved with it: sorts, string joins, integer loops, 1.4-1.9x
    between their 10th and 90th percentiles), while the quickstart's stages ran as its fast
    spells predict. Three estimates in a row read scales 0.51, 0.82 and 0.51 (7.5 to 8.9
    min for a 6.4-minute run), and a second of repeats instead of 0.2 s still read slow in
    four processes of six. The LLVM build moved 1.13x over the same spells. Either probe
    reads high when something slows its kind of code and neither reads low, so the lower
    scale is the least disturbed reading of this core."""
    low, high = LIMITS
    scales = [serial_seconds() / REFERENCE_SERIAL_S]
    build = compile_seconds()
    if build is not None:
        scales.append(build / REFERENCE_COMPILE_S)
    return min(max(min(scales), low), high)
