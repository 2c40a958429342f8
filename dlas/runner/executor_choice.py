"""Which executor runs a sweep: `--executor local|ray [--ray-address A]`, for `dlas run`
and `dlas reproduce` alike. Light to import (the command line builds its options from it);
the executors themselves are imported when one is made."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dlas.runner.refused import ExecutorRefused

if TYPE_CHECKING:
    from dlas.runner.sweep_executor import SweepExecutor
    from dlas.runner.workspace import Workspace

#: The executors `make_executor` knows, by the name `--executor` takes.
EXECUTORS = ("local", "ray")


def make_executor(kind: str, workspace: Workspace, *, address: str | None = None,
                  progress: bool = True) -> SweepExecutor:
    """The executor `--executor KIND [--ray-address A]` names. Raises `ExecutorRefused`
    (with what to do) where it cannot run: Ray missing, or no cluster at the address."""
    if kind not in EXECUTORS:
        raise ExecutorRefused(f"--executor {kind}: not an executor; choose one of "
                              f"{', '.join(EXECUTORS)}")
    if address and kind != "ray":
        raise ExecutorRefused(f"--ray-address {address}: only with --executor ray")
    if kind == "local":
        from dlas.runner.runner import Runner

        return Runner(workspace, progress=progress)
    from dlas.runner.ray_executor import RayRunner, check_reachable, ray_available

    if not ray_available():
        raise ExecutorRefused("--executor ray: Ray is not installed in this environment; "
                              "run scripts/setup.sh (it installs the pinned ray)")
    check_reachable(address or os.environ.get("RAY_ADDRESS") or "local")
    return RayRunner(workspace, address=address, progress=progress)
