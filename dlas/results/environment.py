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


@functools.cache
def capture_environment() -> dict[str, Any]:
    from dlas.targets.host import detect_host_cpu

    cpu = detect_host_cpu()
    return {
        "cpu": cpu,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"),
        "versions": {p: installed_version(p) for p in _PACKAGES},
        "git_commit": git_commit(),
    }


def machine_fingerprint() -> dict[str, Any]:
    """The part of the environment that makes a timing non-transferable."""
    env = capture_environment()
    return {"cpu": env["cpu"].get("model"), "machine": env["machine"],
            "cpu_count": env["cpu_count"], "versions": env["versions"]}
