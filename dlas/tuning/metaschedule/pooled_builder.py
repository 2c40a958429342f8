"""A MetaSchedule builder whose worker processes outlive one batch of candidates.

`ms.builder.LocalBuilder` starts a fresh `PopenPoolExecutor` for every `build` call (and
one more in its constructor, to check the build function): each start spawns workers
that import TVM, about 5 s on these 2-core machines (AMD EPYC Zen 3), which is paid again
for every batch of 8 candidates, for the point's minimal schedules, for its transferred
ones and for its session. TVM restarts the pool because its workers leak memory after
many uses; this builder keeps one pool and restarts it every `restart_every` batches
instead, so the leak stays bounded and the start-up is paid once per point.

The build itself is LocalBuilder's: the same worker function, the same timeout per
candidate (a worker past it is killed, and the pool starts a new one for the next job),
the same error messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
from tvm.support.popen_pool import PopenPoolExecutor, StatusKind


@derived_object
class PooledBuilder(PyBuilder):
    """LocalBuilder with one worker pool reused across `build` calls (see module doc)."""

    def __init__(self, *, max_workers: int, timeout_sec: float,
                 f_build: Callable[..., Any], restart_every: int = 16) -> None:
        super().__init__()
        self.max_workers = max_workers
        self.timeout_sec = timeout_sec
        self.f_build = f_build
        self.restart_every = restart_every
        self._pool: PopenPoolExecutor | None = None
        self._uses = 0

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        pool = self._take_pool()
        jobs = [(self.f_build, None, build_input.mod, build_input.target,
                 _serialize_params(build_input.params)) for build_input in build_inputs]
        results: list[BuilderResult] = []
        for done in pool.map_with_error_catching(lambda job: _worker_func(*job), jobs):
            if done.status == StatusKind.COMPLETE:
                results.append(BuilderResult(done.value, None))
            elif done.status == StatusKind.TIMEOUT:
                results.append(BuilderResult(
                    None, f"LocalBuilder: Timeout, killed after {self.timeout_sec} seconds"))
            else:
                results.append(BuilderResult(
                    None, "LocalBuilder: An exception occurred\n" + str(done.value)))
        return results

    def close(self) -> None:
        """Stop the workers (also done when the builder is collected)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _take_pool(self) -> PopenPoolExecutor:
        if self._pool is not None and self._uses >= self.restart_every:
            self.close()
        if self._pool is None:
            self._pool = PopenPoolExecutor(max_workers=self.max_workers,
                                           timeout=self.timeout_sec)
            self._uses = 0
        self._uses += 1
        return self._pool
