"""What machine and software produced a result; stored with every row."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

_PACKAGES = ("dlas", "apache-tvm", "apache-tvm-ffi", "torch", "torchvision", "onnxruntime",
             "onnx", "pytorch-lightning", "numpy")


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist` (None when it is not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    """The commit of the dlas checkout, with '+dirty' when it has local changes."""
    repo = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return commit.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def cpuinfo_as() -> dict[str, Any] | None:
    """Under `DLAS_CPUINFO`: the saved CPU whose flags chose the code paths, and the
    silicon that ran and timed them. `cpu` then describes the saved CPU, so without this
    a row timed on a Zen 4 as a Zen 3 would read as a Zen 3's timing. None when unset."""
    from dlas.targets.host import CPUINFO_ENV, cpuinfo_override, machine_cpuinfo_fields

    path = cpuinfo_override()
    if path is None:
        return None
    real = machine_cpuinfo_fields()
    return {"setting": os.environ[CPUINFO_ENV], "file": str(path),
            "silicon": {"model": real.get("model name"), "vendor": real.get("vendor_id"),
                        "family": real.get("cpu family"), "model_number": real.get("model"),
                        "flags": (real.get("flags") or real.get("Features") or "").split()}}


def capture_environment() -> dict[str, Any]:
    """This process's environment, read once per `DLAS_CPUINFO` setting."""
    from dlas.targets.host import CPUINFO_ENV

    return _capture(os.environ.get(CPUINFO_ENV))


@functools.cache
def _capture(cpuinfo_setting: str | None) -> dict[str, Any]:
    from dlas.targets.host import detect_host_cpu

    cpu = detect_host_cpu()
    env = {
        "cpu": cpu,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
        "versions": {p: installed_version(p) for p in _PACKAGES},
        "git_commit": git_commit(),
    }
    saved = cpuinfo_as()
    if saved is not None:  # only then: rows of ordinary runs keep one environment
        env["cpuinfo_as"] = saved
    return env


def machine_fingerprint() -> dict[str, Any]:
    """The part of the environment that makes a timing non-transferable. A run under
    `DLAS_CPUINFO` is another one (other code paths, and `cpu` names the saved CPU)."""
    env = capture_environment()
    fingerprint = {"cpu": env["cpu"].get("model"), "machine": env["machine"],
                   "cpu_count": env["cpu_count"], "versions": env["versions"]}
    if "cpuinfo_as" in env:
        fingerprint["cpuinfo_as"] = env["cpuinfo_as"]["setting"]
    return fingerprint
