"""The timing worker pins the threads that run PyTorch's parallel regions, not merely the
threads PyTorch's first region started (one of which never runs a region)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: In a fresh process, as the timing worker does it: start the pool for two threads on
#: CPUs 0 and 1, then run parallel regions and report which threads ran and where each
#: may run.
CHILD = r"""
import json, os
import torch
from dlas.runner.timing_worker import _cpu_ns, _start_openmp, _threads
main = os.getpid()
_start_openmp(2, [0, 1])
before = {t: _cpu_ns(t) for t in _threads()}
x = torch.ones(512, 512)
for _ in range(5):
    torch.mm(x, x)
ran = [t for t in _threads() if t != main and _cpu_ns(t) > before.get(t, 0)]
print(json.dumps({"ran": {str(t): sorted(os.sched_getaffinity(t)) for t in ran},
                  "main": sorted(os.sched_getaffinity(0)),
                  "pinned": os.environ.get("DLAS_OMP_PINNED")}))
"""


@pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1")
def test_the_threads_that_run_parallel_regions_are_the_ones_pinned() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         check=True, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ran"], "no thread besides the main one ran the parallel regions"
    assert all(cpus == [1] for cpus in got["ran"].values()), got
    assert got["main"] == [0]
    assert got["pinned"] == "0,1"


def test_pool_workers_are_the_threads_that_ran_busiest_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dlas.runner import timing_worker

    reads = iter([10, 10, 10,  # before the probe region: threads 1, 2, 3
                  10, 50, 30])  # after: 1 never ran, 2 ran most, 3 less
    monkeypatch.setattr(timing_worker, "_cpu_ns", lambda tid: next(reads))
    monkeypatch.setattr(timing_worker, "_POOL_PROBE_SIDE", 8)
    assert timing_worker.pool_workers([1, 2, 3]) == [2, 3]
