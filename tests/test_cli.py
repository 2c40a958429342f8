"""The command line: plan, run, results, and a third-party plugin package."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlas.cli import main
from tests.conftest import tiny_sweep

REPO = Path(__file__).resolve().parents[1]
DLAS = [sys.executable, "-m", "dlas.cli"]


def test_plan_run_results(tmp_path: Path, shared_cache: Path,
                          capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep(compression=["none", "weight_pruning"]))
    ws = ["--workspace", str(tmp_path / "ws"), "--cache-dir", str(shared_cache)]

    assert main(["plan", str(config), *ws]) == 0
    out = capsys.readouterr().out
    assert "2 points: 2 runnable" in out

    assert main(["run", str(config), "--no-progress", *ws]) == 0
    out = capsys.readouterr().out
    assert "2 ok, 0 failed" in out and "stages" in out

    assert main(["plan", str(config), *ws]) == 0
    assert capsys.readouterr().out.count("all stages cached") == 2

    csv_path = tmp_path / "out.csv"
    assert main(["results", "--csv", str(csv_path), *ws]) == 0
    assert "wrote 2 rows" in capsys.readouterr().out
    assert len(csv_path.read_text().splitlines()) == 3


def test_config_error_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\ndatasets: [digit]\nmodels: [resnet18]\n")
    assert main(["plan", str(config)]) == 2
    out = capsys.readouterr().out
    assert "bad.yaml:2" in out and "Did you mean 'digits'?" in out


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "TVM_NUM_THREADS": "2", **extra}
    env.pop("DLAS_WORKSPACE", None)
    return env


def test_external_plugin_package_runs_in_a_sweep(tmp_path: Path) -> None:
    """Build and install a separate package; its option appears and runs, dlas/ untouched."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), str(REPO / "tests/data/dlas-example-plugin")],
        check=True, capture_output=True, text=True)
    env = _env(PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))

    listing = subprocess.run([*DLAS, "plugins", "--layer", "compression"], env=env,
                             capture_output=True, text=True, check=True).stdout
    assert "magnitude_threshold" in listing and "dlas-example-plugin 0.1.0" in listing

    config = tmp_path / "sweep.yaml"
    config.write_text("""
name: plugin-sweep
datasets: [digits]
models:
  - name: resnet18
    params: {width_multiplier: 0.125}
compression:
  - name: magnitude_threshold
    params: {threshold: 0.3}
budgets: {epochs: 0, measure_repeat: 3, verify_samples: 2}
""")
    result = subprocess.run([*DLAS, "run", str(config), "--no-progress", "--workspace",
                             str(tmp_path / "ws")], env=env, capture_output=True, text=True,
                            cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 ok, 0 failed" in result.stdout
    shown = subprocess.run([*DLAS, "results", "--json", "--workspace", str(tmp_path / "ws")],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert '"compression": "magnitude_threshold(threshold=0.3)"' in shown
    assert '"verified": 1' in shown


@pytest.mark.slow
def test_ctrl_c_mid_training_then_rerun_resumes(tmp_path: Path) -> None:
    """A real SIGINT during training; the re-run resumes from the epoch checkpoint."""
    config = tmp_path / "sweep.yaml"
    config.write_text("""
name: interrupt
datasets: [digits]
models:
  - name: resnet18
    params: {width_multiplier: 0.125}
budgets: {epochs: 10, batch_size: 64, measure_repeat: 3, verify_samples: 2}
""")
    cmd = [*DLAS, "run", str(config), "--no-progress", "--workspace", str(tmp_path / "ws")]
    env = _env(PYTHONPATH=str(REPO))
    # A shell's background job starts with SIGINT ignored, and Python then never installs
    # its Ctrl-C handler; give the child the default disposition, as a terminal would.
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ckpts = tmp_path / "ws" / "cache" / "train"
    deadline = time.time() + 300
    while time.time() < deadline and not list(ckpts.glob("*.partial/*.ckpt")):
        time.sleep(0.5)
    assert list(ckpts.glob("*.partial/*.ckpt")), "no epoch checkpoint appeared"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "interrupted" in out

    rerun = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "resuming training from epoch" in rerun.stdout + rerun.stderr
    assert "1 ok, 0 failed" in rerun.stdout
