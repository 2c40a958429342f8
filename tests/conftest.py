"""Shared fixtures: a tiny sweep that runs every stage for real in seconds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("TVM_NUM_THREADS", "2")

TINY_SWEEP = """
name: {name}
datasets: [digits]
models:
  - name: tiny_cnn
compression:
{compression}
algorithms:
{algorithms}
tuning: [none]
targets: [host]
budgets:
  epochs: 1
  finetune_epochs: 1
  data_fraction: 0.25
  batch_size: 64
  measure_repeat: 5
  verify_samples: 4
"""


def tiny_sweep(name: str = "tiny", compression: list[str] | None = None,
               algorithms: list[str] | None = None) -> str:
    def items(names: list[str]) -> str:
        return "\n".join(f"  - {n}" for n in names)

    return TINY_SWEEP.format(name=name, compression=items(compression or ["none"]),
                             algorithms=items(algorithms or ["direct"]))


@pytest.fixture(scope="session", autouse=True)
def tiny_model() -> Iterator[None]:
    """A three-conv CNN (stride 2, depthwise, 1x1, residual) registered as a model option."""
    from tests.plugins import tiny_cnn  # noqa: F401  (registers `tiny_cnn`)

    yield


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One artifact cache for the session: tests that only need results reuse builds."""
    return tmp_path_factory.mktemp("shared-cache")
