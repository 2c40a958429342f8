"""On a machine with a CUDA GPU: CUDA points are compiled, loaded, verified and timed there.

Skipped where there is no GPU (CI's machines): `tests/test_targets.py` covers the CUDA
compile everywhere. These run on a lent GPU machine (`scripts/gpu_check.sh`): every
convolution algorithm untuned, dense and CSR, one MetaSchedule point, and PyTorch on the
same GPU as the baseline.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlas.results.row import ResultRow
from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.sweep.config import parse_config
from dlas.targets.options import local_cuda_gpu
from tests.conftest import tiny_sweep

GPU = local_cuda_gpu()
pytestmark = pytest.mark.skipif(GPU is None, reason="no CUDA GPU here")

DENSE = ["direct", "gemm", "spatial_pack"]
CSR = ["direct_csr", "gemm_csr", "spatial_pack_csr"]
PRUNED = "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}"


def cuda_sweep(name: str, algorithms: list[str], tuning: str) -> str:
    return (tiny_sweep(name, compression=["none", "weight_pruning"], algorithms=algorithms)
            .replace("  - weight_pruning", PRUNED)
            .replace("targets: [host]", "targets: [cuda]")
            .replace("tuning: [none]", tuning))


def run(text: str, root: Path, cache: Path) -> tuple[RunReport, list[ResultRow]]:
    report = Runner(Workspace(root, cache), progress=False).run(parse_config(text))
    with ResultStore(root / "results.db") as store:
        return report, store.rows()


def assert_measured(row: ResultRow) -> None:
    assert row.status == "ok", (row.algorithm, row.tuning, row.error)
    assert row.verified == 1, (row.algorithm, row.error)
    assert row.device_kind == "gpu"
    assert row.latency_median_ms is not None and math.isfinite(row.latency_median_ms)
    assert 0 < row.latency_median_ms < 1000


def test_every_algorithm_and_pytorch_are_measured_on_the_gpu(tmp_path: Path,
                                                             shared_cache: Path) -> None:
    text = cuda_sweep("cuda_untuned", DENSE + CSR, "tuning: [none, pytorch]")
    report, rows = run(text, tmp_path, shared_cache)
    assert report.failed == 0, [(r.algorithm, r.compression, r.error) for r in rows]
    measured = [r for r in rows if r.status != "not_runnable"]
    # dense algorithms on both models, CSR on the pruned one, PyTorch on both (a row's
    # compression is its option's label: "weight_pruning(level=0.9,levels=[0.9])")
    assert {(r.compression.split("(")[0], r.algorithm) for r in measured
            if r.backend == "tvm"} >= \
        {("none", a) for a in DENSE} | {("weight_pruning", a) for a in CSR}
    for row in measured:
        assert_measured(row)
    torch_rows = [r for r in measured if r.backend == "pytorch"]
    assert len(torch_rows) == 2
    assert all(r.runtime_info["device"] == GPU["name"] for r in torch_rows)


def test_a_metaschedule_point_is_tuned_and_measured_on_the_gpu(tmp_path: Path,
                                                               shared_cache: Path) -> None:
    tuning = ("tuning:\n  - name: metaschedule\n    params: {trials: 8, trials_per_task: 8,"
              " trials_per_iter: 8, population: 16, early_stopping: null, tasks: convs}")
    text = cuda_sweep("cuda_tuned", ["direct"], tuning).replace(
        PRUNED + "\n", "")  # dense only (the sparse point: the test below)
    report, rows = run(text, tmp_path, shared_cache)
    assert report.failed == 0, [(r.algorithm, r.error) for r in rows]
    (row,) = rows
    assert_measured(row)
    assert row.tuning_trials and row.tuning_trials > 0


def test_a_sparse_point_is_tuned_and_measured_on_the_gpu(tmp_path: Path,
                                                        shared_cache: Path) -> None:
    """The pruned model's CSR row kernels searched in the GPU sparse space
    (`gpu_csr_space`: threads per block, unrolling), verified and timed there."""
    tuning = ("tuning:\n  - name: metaschedule\n    params: {trials: 8, trials_per_task: 8,"
              " trials_per_iter: 8, population: 16, early_stopping: null, tasks: convs}")
    text = cuda_sweep("cuda_sparse_tuned", ["gemm_csr"], tuning)
    report, rows = run(text, tmp_path, shared_cache)
    measured = [r for r in rows if r.status != "not_runnable"]
    assert report.failed == 0, [(r.algorithm, r.error) for r in rows]
    (row,) = measured  # gemm_csr on the pruned model (the dense one has no zeros)
    assert_measured(row)
    assert row.tuning_trials and row.tuning_trials > 0


def test_cuda_graphs_and_pytorchs_modes_are_measured_on_the_gpu(tmp_path: Path,
                                                                 shared_cache: Path) -> None:
    """TVM with and without its CUDA-graph rewrite, and PyTorch eager, replayed from a
    CUDA graph and torch.compile'd, all verified on the same GPU in one sweep."""
    tuning = ("tuning: [none, pytorch, {name: pytorch, params: {mode: cuda_graph}}, "
              "{name: pytorch, params: {mode: compile}}]")
    text = cuda_sweep("cuda_graphs", ["direct"], tuning).replace(PRUNED + "\n", "").replace(
        "targets: [cuda]", "targets: [cuda, {name: cuda, params: {cuda_graph: true}}]")
    report, rows = run(text, tmp_path, shared_cache)
    assert report.failed == 0, [(r.target, r.tuning, r.error) for r in rows]
    measured = [r for r in rows if r.status != "not_runnable"]
    assert {(r.target.split("(")[-1], r.tuning.split("(")[-1]) for r in measured} >= {
        ("cuda", "none"), ("cuda_graph=True)", "none"), ("cuda", "pytorch"),
        ("cuda", "mode=cuda_graph)"), ("cuda", "mode=compile)")}
    for row in measured:
        assert_measured(row)
    torch_rows = [r for r in measured if r.backend == "pytorch"]
    assert all(r.runtime_info["gpu_math"] == "ieee float32" for r in torch_rows)


def test_split_reduction_schedules_are_verified_on_the_gpu(tmp_path: Path,
                                                           shared_cache: Path) -> None:
    """`cuda(schedules=reduction)`: every dense algorithm with each output's reduction
    split over a warp's lanes computes the model's function on the GPU (its epilogue after
    the lanes' sum), in float32 and float16."""
    text = (cuda_sweep("cuda_split", DENSE, "tuning: [none]")
            .replace(PRUNED + "\n", "").replace("  - weight_pruning\n", "")
            .replace("targets: [cuda]", "targets: [{name: cuda, params: {schedules: reduction}}]")
            .replace("  - none\nalgorithms:", "  - none\n  - float16\nalgorithms:"))
    report, rows = run(text, tmp_path, shared_cache)
    assert report.failed == 0, [(r.algorithm, r.compression, r.error) for r in rows]
    measured = [r for r in rows if r.status != "not_runnable"]
    assert {(r.compression, r.algorithm) for r in measured} == {
        (c, a) for c in ("none", "float16") for a in DENSE}
    for row in measured:
        assert_measured(row)
        assert "schedules=reduction" in row.target
