"""Several dlas processes on one workspace: each entry computed once, claims of dead
processes expire, timings never overlap other dlas work, stale temp folders go."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dlas.runner.cache import Cache
from dlas.runner.claims import Claims
from dlas.runner.machine import MachineLock
from dlas.stages.base import Resources
from tests.conftest import tiny_sweep

ROOT = Path(__file__).resolve().parents[1]

HOLD_CLAIM = """
import sys, time
from pathlib import Path
from dlas.runner.claims import Claims
with Claims(Path(sys.argv[1])).hold("train", "k1"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(cache: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD_CLAIM, str(cache), str(seconds)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_claim_is_waited_for_and_the_claim_of_a_killed_process_expires(
        tmp_path: Path) -> None:
    claims = Claims(tmp_path)
    proc = _holder(tmp_path, 60)
    try:
        assert claims.is_held("train", "k1")
        assert not claims.is_held("train", "other")
        proc.send_signal(signal.SIGKILL)  # dies holding it: no clean-up runs
        proc.wait(timeout=10)
        assert not claims.is_held("train", "k1")
        with claims.hold("train", "k1"):
            assert claims.is_held("train", "k1") is True
    finally:
        proc.kill()
    assert not claims.path("train", "k1").exists()  # released claims leave no file


def test_the_claim_file_a_killed_holder_left_is_pruned_and_a_live_ones_stays(
        tmp_path: Path) -> None:
    """A holder killed after storing its entry leaves its claim file, and no later process
    takes that claim (the entry is stored): a run's clean-up removes it (seen when a Ray
    node died mid-sweep)."""
    claims = Claims(tmp_path)
    dead = _holder(tmp_path, 60)
    dead.send_signal(signal.SIGKILL)
    dead.wait(timeout=10)
    assert claims.path("train", "k1").exists()
    live = subprocess.Popen([sys.executable, "-c", HOLD_CLAIM.replace('"k1"', '"k2"'),
                             str(tmp_path), "60"], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "held"
        assert claims.prune() == 1
        assert not claims.path("train", "k1").exists()
        assert claims.is_held("train", "k2") and claims.holder("train", "k2").pid == live.pid
    finally:
        live.kill()
        live.wait(timeout=10)


def test_a_waiter_is_told_who_holds_the_claim_and_gets_it_on_release(tmp_path: Path) -> None:
    claims = Claims(tmp_path)
    proc = _holder(tmp_path, 1.5)
    told = []
    start = time.monotonic()
    with claims.hold("train", "k1", waiting=told.append):
        waited = time.monotonic() - start
    proc.wait(timeout=10)
    assert waited > 0.5
    assert len(told) == 1 and told[0] is not None and told[0].pid == proc.pid


def test_stale_temp_folders_go_and_a_live_writers_stay(tmp_path: Path) -> None:
    cache, claims = Cache(tmp_path), Claims(tmp_path)
    dead = tmp_path / "compile" / ".tmp-aaaa-1234abcd"
    live = tmp_path / "train" / ".tmp-k1-deadbeef"
    trash = tmp_path / "measure" / ".discard-bbbb-00000000"
    for path in (dead, live, trash):
        path.mkdir(parents=True)
    with claims.hold("train", "k1"):  # another writer (its own descriptor) is at work
        assert cache.clean_stale(claims.is_held) == 2
    assert live.exists() and not dead.exists() and not trash.exists()


def _hold_in_thread(lock: MachineLock, resources: Resources, log: list[str], name: str,
                    seconds: float) -> threading.Thread:
    def body() -> None:
        with lock.hold(resources):
            log.append(f"{name}+")
            time.sleep(seconds)
            log.append(f"{name}-")

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_a_timing_waits_for_work_and_new_work_waits_for_the_timing(tmp_path: Path) -> None:
    log: list[str] = []
    work, timing = Resources(), Resources(exclusive=True)
    w1 = _hold_in_thread(MachineLock(tmp_path), work, log, "w1", 1.0)
    time.sleep(0.2)
    told: list[str] = []
    t = threading.Thread(target=lambda: _time(MachineLock(tmp_path), timing, log, told))
    t.start()
    time.sleep(0.3)  # the timing is waiting for w1 now, holding the turnstile
    w2 = _hold_in_thread(MachineLock(tmp_path), work, log, "w2", 0.1)
    for thread in (w1, t, w2):
        thread.join(timeout=20)
    assert log == ["w1+", "w1-", "t+", "t-", "w2+", "w2-"]
    assert told and "before timing" in told[0]


def _time(lock: MachineLock, resources: Resources, log: list[str], told: list[str]) -> None:
    with lock.hold(resources, waiting=told.append):
        log.append("t+")
        time.sleep(0.3)
        log.append("t-")


def test_work_shares_the_machine_and_nested_holds_do_not_wait_for_themselves(
        tmp_path: Path) -> None:
    log: list[str] = []
    a = _hold_in_thread(MachineLock(tmp_path), Resources(), log, "a", 0.5)
    time.sleep(0.1)
    lock = MachineLock(tmp_path)
    start = time.monotonic()
    with lock.hold(Resources()), lock.hold(Resources(exclusive=True)):
        pass
    assert time.monotonic() - start < 0.4  # shared beside `a`; the nested hold is a no-op
    a.join(timeout=10)


RUN_SWEEP = """
import json, sys
sys.path.insert(0, {root!r})
import tests.plugins.tiny_cnn  # noqa: F401 - registers the test model
from dlas.runner.runner import Runner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import parse_config
report = Runner(Workspace(sys.argv[1]), progress=False).run(
    parse_config(open(sys.argv[2]).read()))
print("REPORT " + json.dumps({{"computed": dict(report.computed), "ok": report.ok,
                              "points": report.points}}))
"""


@pytest.mark.slow
def test_two_concurrent_runs_of_one_sweep_compute_nothing_twice(tmp_path: Path) -> None:
    text = tiny_sweep(compression=["none", "weight_pruning"], algorithms=["direct", "gemm"])
    text = text.replace("  - weight_pruning",
                        "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}")
    config = tmp_path / "sweep.yaml"
    config.write_text(text)
    env = {**os.environ, "DLAS_LOCK_DIR": str(tmp_path / "locks")}
    script = RUN_SWEEP.format(root=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "ws"),
                               str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT, env=env) for _ in range(2)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        line = next(x for x in out.splitlines() if x.startswith("REPORT "))
        reports.append(json.loads(line[len("REPORT "):]))
    assert [r["ok"] for r in reports] == [4, 4]
    total = {s: sum(r["computed"].get(s, 0) for r in reports)
             for s in ("train", "compress", "import", "compile", "measure")}
    assert total == {"train": 1, "compress": 2, "import": 2, "compile": 4, "measure": 4}
    # the work was split, not queued: each process computed some of the entries after
    # the one training they share
    for r in reports:
        assert sum(r["computed"].get(s, 0) for s in ("compress", "import", "compile")) >= 1, \
            reports

    # no timing overlapped another process's work
    spans = []
    for meta in (tmp_path / "ws" / "cache").glob("*/*/meta.json"):
        by = json.loads(meta.read_text())["computed_by"]
        spans.append((by["pid"], by["exclusive"], *by["span"]))
    assert {pid for pid, *_ in spans} <= {p.pid for p in procs}
    for pid, exclusive, start, end in spans:
        if exclusive:
            assert not [s for s in spans
                        if s[0] != pid and s[2] < end and start < s[3]], (pid, start, end)
    assert not list((tmp_path / "ws" / "cache").glob("*/.tmp-*"))
    assert not list((tmp_path / "ws" / "cache").glob("*/.claim-*"))


@pytest.mark.slow
def test_a_run_moves_on_past_an_entry_another_process_holds_and_comes_back(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Another process holds the pruned point's compress entry: the run does not queue
    behind it; it finishes the dense point (compile, timing, row) first, then comes back
    for the pruned one once the claim is released, and computes it itself."""
    from dlas import registry
    from dlas.results.store import ResultStore
    from dlas.runner.runner import Runner
    from dlas.runner.workspace import Workspace
    from dlas.stages import stage_keys
    from dlas.sweep.config import parse_config
    from dlas.sweep.grid import expand

    registry.load_plugins()
    text = tiny_sweep(compression=["weight_pruning", "none"]).replace(
        "  - weight_pruning", "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}")
    config = parse_config(text)
    pruned = next(p for p in expand(config) if p.compression.name == "weight_pruning")
    cache = tmp_path / "ws" / "cache"
    key = stage_keys(pruned).compress
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_CLAIM.replace('"train", "k1"', f'"compress", "{key}"'),
         str(cache), "25"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        report = Runner(Workspace(tmp_path / "ws"), progress=False,
                        machine_lock=MachineLock(tmp_path / "locks")).run(config)
    finally:
        holder.kill()
        holder.wait()
    out = capsys.readouterr().out
    assert report.ok == 2 and report.computed["compress"] == 2
    assert f"waiting: compress {key[:10]} is being computed by another dlas process" in out
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        rows = store.rows()
    # the dense point (second in the grid) was finished first
    assert [r.compression.split("(")[0] for r in rows] == ["none", "weight_pruning"]
    assert out.index("-> ok") < out.index(f"compress  computing ... (key {key[:10]})")
