"""All six algorithms through a real sweep: CSR only where the compression left zeros."""

from __future__ import annotations

from pathlib import Path

from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep

ALGORITHMS = ["direct", "gemm", "spatial_pack", "direct_csr", "gemm_csr", "spatial_pack_csr"]


def test_every_algorithm_runs_in_a_sweep(tmp_path: Path, shared_cache: Path) -> None:
    text = tiny_sweep(name="algorithms", compression=["none", "weight_pruning"],
                      algorithms=ALGORITHMS).replace(
        "  - weight_pruning", "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}")
    report = Runner(Workspace(tmp_path, shared_cache), progress=False).run(parse_config(text))
    assert (report.points, report.failed) == (12, 0)
    with ResultStore(tmp_path / "results.db") as store:
        rows = {(r.config["choices"]["compression"]["name"], r.algorithm): r
                for r in store.rows()}

    for algorithm in ALGORITHMS:
        pruned = rows[("weight_pruning", algorithm)]
        assert pruned.status == "ok", pruned.error
        assert pruned.verified == 1 and pruned.top1_agreement == 1.0
        dense = rows[("none", algorithm)]
        if algorithm.endswith("_csr"):
            assert dense.status == "not_runnable"
            assert "CSR needs a compression that leaves zero weights" in dense.error
        else:
            assert dense.status == "ok", dense.error
    # tiny_cnn has a depthwise conv, which dense spatial pack computes with its documented
    # fallback, and a stride-2 stem, which direct CSR reads through spatial pack's phase
    # planes; the sparse spatial pack and GEMM compute every conv themselves
    for algorithm, fallback in [("spatial_pack", "direct"), ("direct_csr", "spatial_pack_csr")]:
        lines = rows[("weight_pruning", algorithm)].conv_fallbacks
        assert len(lines) == 1 and lines[0].endswith(f"computed with {fallback}"), lines
    for algorithm in ("gemm", "spatial_pack_csr", "gemm_csr"):
        assert rows[("weight_pruning", algorithm)].conv_fallbacks == []
    # where each compile's time went (import: the shared import stage's seconds)
    for row in rows.values():
        if row.status == "ok":
            phases = row.compile_phases
            assert list(phases) == ["import", "lower", "fold", "schedule", "codegen", "export"]
            assert all(seconds >= 0 for seconds in phases.values())
