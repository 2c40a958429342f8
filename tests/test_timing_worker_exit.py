"""The timing worker ends without the runtimes' exit handlers (`exit_now`): TVM's pinned
pool threads spin on sched_yield at exit, and beside a busy process on a pinned CPU that
took 10-20 minutes. What it printed before is flushed; its result file is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import cloudpickle

from dlas.measure.stopping import RoundsPolicy
from dlas.runner.timing_groups import TimingRequest, worker_env


def test_exit_now_flushes_output_and_skips_exit_handlers() -> None:
    code = ("import atexit\n"
            "atexit.register(lambda: print('exit handler ran'))\n"
            "from dlas.runner.timing_worker import exit_now\n"
            "print('before', end='')\n"
            "exit_now(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=worker_env(None), timeout=120)
    assert done.returncode == 3
    assert done.stdout == "before"


def test_the_worker_writes_its_results_and_exits_zero(tmp_path: Path) -> None:
    request = TimingRequest(workspace_root=str(tmp_path), cache_dir=str(tmp_path / "cache"),
                            members=[], policy=RoundsPolicy(), threads=1, cpus=None,
                            single=True, probe_placement=False)
    req, out = tmp_path / "request.pkl", tmp_path / "result.json"
    req.write_bytes(cloudpickle.dumps(request))
    done = subprocess.run([sys.executable, "-m", "dlas.runner.timing_worker", str(req),
                           str(out)], capture_output=True, text=True, env=worker_env(1),
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == []
