"""Running and timing compiled models, with the DLAS paper's method.

Paper method: batch size 1, TVM's time evaluator, warm-up run discarded, report the
median of the samples (the caller takes the median; `time_vm` returns all samples).

Threads: TVM's CPU thread pool is process-wide. It reads TVM_NUM_THREADS when first
used and otherwise takes half the logical CPUs on x86 (1 thread on a 2-vCPU VM), so a
measurement should say how many threads it uses: pass `num_threads` to `time_vm` /
`run_batch`, or call `set_num_threads` once. Changing TVM_NUM_THREADS after the pool
exists has no effect; `set_num_threads` reconfigures the live pool instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import tvm
from tvm import relax
from tvm_ffi import get_global_func

from dlas.targets.host import allowed_cpus

ENTRY = "main"

#: runtime.config_threadpool modes: threads share all listed CPUs (no per-thread pinning),
#: or each worker thread pinned to one listed CPU.
_SHARE_ALL_CORES = -3
_ONE_CORE_PER_THREAD = -2


def pinnable_cpus(num_threads: int) -> list[int] | None:
    """The CPUs `num_threads` threads are pinned to, one each (the first for the calling
    thread), or None when this process may not use that many."""
    cpus = allowed_cpus()
    return cpus[:num_threads] if 1 <= num_threads <= len(cpus) else None


def set_num_threads(num_threads: int, pin: list[int] | None = None) -> int:
    """Resize TVM's CPU thread pool to `num_threads` workers; return the size it took.

    Uses `runtime.config_threadpool` with an explicit CPU list, which (unlike
    TVM_NUM_THREADS) also works after the pool was created and is not capped at half the
    logical CPUs. By default threads float over all CPUs this process is allowed on.

    `pin` (the timing worker's choice, `pinnable_cpus`): one CPU per thread; the calling
    thread, which runs TVM's task 0, is pinned to the first and each pool worker to one
    of the others. Measured why: with floating threads the kernel sometimes put both
    threads of a 2-thread pool on one vCPU for seconds at a time, and a fork-join then
    cost 2.7 us instead of 0.75 (a third "placement" in which two threads were slower than
    one); pinned, that state did not occur (docs/timing.md).
    """
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    os.environ["TVM_NUM_THREADS"] = str(num_threads)  # for child processes (RPC, builders)
    configure = get_global_func("runtime.config_threadpool")
    if pin is not None:
        if len(pin) != num_threads:
            raise ValueError(f"pin lists {len(pin)} CPUs for {num_threads} threads")
        configure(_ONE_CORE_PER_THREAD, int(num_threads), [str(c) for c in pin])
        os.sched_setaffinity(0, {pin[0]})  # this thread only (pid 0: the caller)
    else:
        cpus = [str(c) for c in allowed_cpus()]
        configure(_SHARE_ALL_CORES, int(num_threads), cpus)
    return num_threads_in_use()


def num_threads_in_use() -> int:
    """Workers of TVM's CPU thread pool as it is configured now."""
    return int(get_global_func("runtime.NumThreads")())


def load_vm(
    executable_path: Path, device: tvm.runtime.Device | None = None
) -> relax.VirtualMachine:
    """Load an exported library (see `dlas.compiler.build`) as a Relax VM."""
    lib = tvm.runtime.load_module(str(executable_path))
    return relax.VirtualMachine(lib, device if device is not None else tvm.cpu())


def _first_tensor(out) -> np.ndarray:
    """The model output as numpy (the first field when the VM returns a tuple)."""
    while not hasattr(out, "numpy"):
        out = out[0]
    return out.numpy()


def run_batch(
    vm: relax.VirtualMachine,
    inputs: np.ndarray,
    device: tvm.runtime.Device | None = None,
    num_threads: int | None = None,
) -> np.ndarray:
    """Run samples (N, C, H, W) through the batch-1 model one by one -> (N, classes) float32."""
    if num_threads is not None:
        set_num_threads(num_threads)
    dev = device if device is not None else tvm.cpu()
    outs = []
    for i in range(inputs.shape[0]):
        sample = tvm.runtime.tensor(np.ascontiguousarray(inputs[i : i + 1]), dev)
        out = _first_tensor(vm[ENTRY](sample))
        outs.append(out.reshape(1, -1))
    return np.concatenate(outs, axis=0).astype(np.float32)


def time_vm(
    vm: relax.VirtualMachine,
    input: np.ndarray,  # noqa: A002 - the name the rest of dlas calls it by
    repeat: int,
    number: int = 1,
    warmup: int = 1,
    device: tvm.runtime.Device | None = None,
    num_threads: int | None = None,
) -> list[float]:
    """Seconds per inference, `repeat` samples, each the mean of `number` runs.

    `warmup` runs are discarded first: the time evaluator always makes one, extra ones
    are run before it. The whole VM entry function is timed (input already on the
    device), as TVM's graph executor `run()` was in the paper.
    """
    if repeat < 1 or number < 1:
        raise ValueError("repeat and number must be >= 1")
    if num_threads is not None:
        set_num_threads(num_threads)
    dev = device if device is not None else tvm.cpu()
    vm.set_input(ENTRY, tvm.runtime.tensor(np.ascontiguousarray(input), dev))
    for _ in range(max(warmup, 1) - 1):
        vm.invoke_stateful(ENTRY)
    evaluator = vm.time_evaluator("invoke_stateful", dev, number=number, repeat=repeat)
    return [float(t) for t in evaluator(ENTRY).results]
