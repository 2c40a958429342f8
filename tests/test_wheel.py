"""dlas as a user installs it: a built wheel (and one built from the sdist) in a fresh
virtual environment, run from outside the checkout.

The environment gets the wheel and nothing of the checkout: its dependencies come from this
test's own environment through a folder of links that leaves out every `dlas` entry (the
editable install's finder and metadata), so `import dlas` can only find the wheel's copy.
Then, in a folder far from the repository: `dlas plugins` lists what the checkout lists,
`dlas init` writes the starter config, a small real sweep runs and ends on the paper's
observations (which need `experiments/paper.yaml`, carried as package data), `dlas report`
writes its report, and `dlas reproduce`'s experiments resolve.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

SWEEP = """
name: wheel
datasets: [digits]
models:
  - name: resnet18
    params: {width_multiplier: 0.125}
compression: [none]
algorithms: [direct]
tuning: [none]
targets: [host]
budgets:
  epochs: 1
  data_fraction: 0.25
  batch_size: 64
  measure_repeat: 5
  verify_samples: 4
  timing_rounds: 2
  timing_passes: 1
  placement_wait_s: 0
  noise_budget_s: 1
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _build(tmp: Path) -> tuple[Path, Path]:
    """(the wheel built from the checkout, the one built from its sdist)."""
    dist = tmp / "dist"
    _run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
          "b.build_sdist(sys.argv[1])", str(dist)], cwd=REPO)
    (sdist,) = dist.glob("dlas-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    wheels = []
    for source, out in ((REPO, tmp / "wheel"), (unpacked, tmp / "wheel-from-sdist")):
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
              "-q", "-w", str(out), str(source)], cwd=tmp)
        wheels.append(next(out.glob("dlas-*.whl")))
    return wheels[0], wheels[1]


def _fresh_venv(tmp: Path, wheel: Path) -> Path:
    """A venv holding `wheel`, with this environment's packages but not its dlas."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    deps = tmp / "deps"
    deps.mkdir()
    here = Path(sysconfig.get_paths()["purelib"])
    for entry in here.iterdir():
        if entry.name.lower().startswith(("dlas", "__editable__")) or entry.suffix == ".pth":
            continue
        (deps / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; "
                      "print(sysconfig.get_paths()['purelib'])"], cwd=tmp).stdout.strip())
    (site / "_deps.pth").write_text(f"{deps}\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "-q", str(wheel)], cwd=tmp)
    return venv


def test_the_wheel_carries_the_data_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    wheel, from_sdist = _build(tmp_path)
    for built in (wheel, from_sdist):
        names = set(zipfile.ZipFile(built).namelist())
        assert {"dlas/_data/experiments/paper.yaml", "dlas/_data/experiments/cifar10_cpu.yaml",
                "dlas/_data/configs/quickstart.yaml",
                "dlas/measure/native/pingpong.c", "dlas/targets/cpuinfo/zen3.txt"} <= names, built

    venv = _fresh_venv(tmp_path, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",
                                                            "DLAS_EXPERIMENTS_DIR")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    env["COLUMNS"] = "300"  # both listings in one width
    dlas = [str(venv / "bin" / "dlas")]

    where = _run([str(venv / "bin" / "python"), "-c",
                  "import dlas, dlas.resources as r; print(dlas.__file__); "
                  "print(r.data_dir('experiments'))"], cwd=outside, env=env).stdout.split()
    assert all(str(venv) in line and str(REPO) not in line for line in where), where

    listed = _run([*dlas, "plugins"], cwd=outside, env=env).stdout
    here = _run([sys.executable, "-m", "dlas.cli", "plugins"], cwd=REPO,
                env={**os.environ, "COLUMNS": "300"}).stdout
    assert listed.split() == here.split()

    _run([*dlas, "init", "starter.yaml"], cwd=outside, env=env)
    assert (outside / "starter.yaml").read_text() == \
        (REPO / "configs" / "quickstart.yaml").read_text()

    (outside / "wheel.yaml").write_text(SWEEP)
    run = _run([*dlas, "run", "wheel.yaml", "--no-progress", "--workspace", "ws"],
               cwd=outside, env=env).stdout
    assert "1 ok" in run and "observations" in run and "not decided here" not in run, run
    _run([*dlas, "report", "--workspace", "ws"], cwd=outside, env=env)
    assert "paper" in (outside / "ws" / "report" / "report.md").read_text()

    _run([str(venv / "bin" / "python"), "-c",
          "from dlas.report.experiments import load_experiment; "
          "e = load_experiment('cifar10_cpu'); assert e.profile('quick').sweep_name"],
         cwd=outside, env=env)
