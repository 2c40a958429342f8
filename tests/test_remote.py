"""Remote boards over a real loopback TVM RPC tracker + server (tests/rpc_fixtures.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dlas.measure.session import NoFreeDevice, TrackerUnreachable, request_session
from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.sweep.config import parse_config
from dlas.targets.base import RPCTracker
from tests.conftest import tiny_sweep
from tests.rpc_fixtures import (  # noqa: F401 - fixtures
    RPCBoard,
    free_port,
    rpc_board,
    rpc_tracker_only,
)


def remote_target(board: RPCBoard, request_timeout_s: float = 30.0, threads: int = 1) -> str:
    return (f"  - name: remote\n    params: {{tracker_host: {board.host}, tracker_port: "
            f"{board.port}, key: {board.key}, request_timeout_s: {request_timeout_s}, "
            f"target: {{name: llvm, params: {{threads: {threads}}}}}}}")


def sweep(name: str, *targets: str) -> str:
    return tiny_sweep(name).replace("targets: [host]", "targets:\n" + "\n".join(targets))


def run(text: str, root: Path, cache: Path) -> RunReport:
    return Runner(Workspace(root, cache), progress=False).run(parse_config(text))


def rows(root: Path) -> list[dict]:
    with ResultStore(root / "results.db") as store:
        return store.rows()


def test_sweep_point_measured_on_the_board(rpc_board: RPCBoard, tmp_path: Path,  # noqa: F811
                                           shared_cache: Path) -> None:
    report = run(sweep("remote", remote_target(rpc_board)), tmp_path, shared_cache)
    assert (report.ok, report.failed) == (1, 0), report.rows
    row = rows(tmp_path)[0]
    assert row.status == "ok" and row.verified == 1
    assert row.top1_agreement == 1.0 and row.max_abs_diff < 1e-3
    assert len(row.latency_samples_ms) >= 5 and row.latency_median_ms > 0
    assert row.threads == 1  # the board's pool, as the target asked
    assert report.computed["measure"] == 1
    # this machine can see neither the board's load nor where its CPUs sit: no probes
    assert row.placement == "unknown" and row.placement_round_trip_ns is None
    assert row.load_other_cores is None and row.loaded_rounds == 0
    assert row.latency_ci_low_ms <= row.latency_median_ms <= row.latency_ci_high_ms

    again = run(sweep("remote", remote_target(rpc_board)), tmp_path, shared_cache)
    assert again.ok == 1 and again.reused["measure"] == 1  # cached per board key


def test_unreachable_tracker_is_a_failed_point_and_the_sweep_goes_on(
        tmp_path: Path, shared_cache: Path) -> None:
    nowhere = RPCBoard("127.0.0.1", free_port(), "nobody")
    report = run(sweep("unreachable", remote_target(nowhere), "  - host"), tmp_path,
                 shared_cache)
    assert (report.failed, report.ok) == (1, 1)
    failed = next(r for r in rows(tmp_path) if r.status == "failed")
    assert failed.error_stage == "measure"
    assert f"127.0.0.1:{nowhere.port}" in failed.error
    assert "tvm.exec.rpc_tracker" in failed.error  # how to start one


def test_no_free_device_is_a_failed_point(rpc_tracker_only: RPCBoard,  # noqa: F811
                                          tmp_path: Path, shared_cache: Path) -> None:
    report = run(sweep("busy", remote_target(rpc_tracker_only, request_timeout_s=1.0)),
                 tmp_path, shared_cache)
    assert report.failed == 1
    failed = rows(tmp_path)[0]
    assert failed.error_stage == "measure"
    assert "NoFreeDevice" in failed.error
    assert f"'{rpc_tracker_only.key}'" in failed.error
    assert "no server registered" in failed.error  # what the tracker reports


def test_request_errors_name_the_tracker_and_key(rpc_tracker_only: RPCBoard) -> None:  # noqa: F811
    host, port, key = rpc_tracker_only
    start = time.monotonic()
    with pytest.raises(NoFreeDevice, match=f"key '{key}'.*within 0.5 s"):
        request_session(RPCTracker(host, port, key, request_timeout_s=0.5))
    assert time.monotonic() - start < 15
    with pytest.raises(TrackerUnreachable, match="no RPC tracker at 127.0.0.1"):
        request_session(RPCTracker(host, free_port(), key, request_timeout_s=0.5))


def test_remote_session_runs_on_the_board(rpc_board: RPCBoard) -> None:  # noqa: F811
    """The session itself: a board under the key, its thread pool resized on request."""
    from dlas.measure.session import RemoteSession

    with RemoteSession(RPCTracker(*rpc_board)) as session:
        assert str(session.device).startswith("remote") and "cpu" in str(session.device)
        assert session.threads_in_use() == 1  # the server's TVM_NUM_THREADS
