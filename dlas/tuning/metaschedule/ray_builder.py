"""A MetaSchedule builder whose candidate builds fan out over a Ray cluster's CPUs.

Builds are most of a trial's cost on small machines (LLVM per candidate), and they need
no particular machine: any node with the same TVM builds the same library. Candidates
are still *run* on the target machine, by the point's own runner. Each candidate is one
Ray task (1 CPU) that builds it with the local builder's function (`build_worker`),
exports it as MetaSchedule's default export does (a tar of object files, linked by the
runner), and returns the bytes; the builder writes them next to the runner so it can
load them.

Used by the tuning of a point computed inside a Ray task when the cluster has CPUs
beyond that task's node (`fan_out_possible`); elsewhere builds stay local
(`PooledBuilder`), so a single-node Ray never waits for CPUs its own tuning task holds.
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params


def build_remotely(f_build: Callable[..., Any], mod: Any, target: Any,
                   params: bytearray | None) -> bytes:
    """A Ray task's body: build one candidate, return its exported library's bytes."""
    from tvm.s_tir.meta_schedule.builder.local_builder import (
        _deserialize_params,
        default_export,
    )

    artifact = Path(default_export(f_build(mod, target, _deserialize_params(params))))
    try:
        return artifact.read_bytes()
    finally:
        shutil.rmtree(artifact.parent, ignore_errors=True)


def fan_out_possible() -> bool:
    """Whether this process is a Ray task on a cluster with CPUs on other nodes."""
    # A Ray task's process has imported Ray already; any other need not pay for the
    # import (1.4 s on a Zen 3, in every tuned point of a local sweep) to learn it is not one.
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    context = ray.get_runtime_context()
    if context.worker.mode != ray.WORKER_MODE:
        return False
    here = context.get_node_id()
    return any(n.get("Alive") and n["NodeID"] != here and n["Resources"].get("CPU", 0) >= 1
               for n in ray.nodes())


@derived_object
class RayBuilder(PyBuilder):
    """Builds candidates as Ray tasks (see the module doc)."""

    def __init__(self, *, f_build: Callable[..., Any], timeout_sec: float,
                 artifact_dir: Path | None = None) -> None:
        super().__init__()
        self.f_build = f_build
        self.timeout_sec = timeout_sec
        self.artifact_dir = Path(artifact_dir or tempfile.mkdtemp(prefix="dlas-ray-build-"))
        self.artifact_dir.mkdir(parents=True, exist_ok=True)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        import ray

        task = ray.remote(build_remotely).options(num_cpus=1, max_retries=2)
        refs = [task.remote(self.f_build, b.mod, b.target, _serialize_params(b.params))
                for b in build_inputs]
        # every candidate gets `timeout_sec` of building, in as many waves as the cluster
        # needs to build them all
        cpus = max(1.0, float(ray.cluster_resources().get("CPU", 1.0)))
        waves = math.ceil(len(refs) / cpus)
        done, late = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_sec * waves)
        for ref in late:
            ray.cancel(ref, force=True)
        finished = set(done)
        results = []
        for ref in refs:
            if ref not in finished:
                results.append(BuilderResult(
                    None, f"RayBuilder: Timeout, cancelled after {self.timeout_sec} seconds"))
                continue
            try:
                data = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - reported per candidate, as LocalBuilder
                results.append(BuilderResult(None, f"RayBuilder: An exception occurred\n{exc}"))
                continue
            # a folder per candidate, as the default export makes (runners that clean up
            # remove an artifact's folder)
            path = self.artifact_dir / uuid.uuid4().hex / "tvm_tmp_mod.tar"
            path.parent.mkdir()
            path.write_bytes(data)
            results.append(BuilderResult(str(path), None))
        return results

    def close(self) -> None:
        """Remove the artifacts (the runner has run them by now)."""
        shutil.rmtree(self.artifact_dir, ignore_errors=True)
