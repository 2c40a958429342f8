"""scripts/setup.sh's stamps: `setup.sh run` leaves the import check to the command after it,
and the next set-up checks before anything else (a failed check sets up again).

The environment is a stub (DLAS_VENV): its `python` and `uv` record what they were asked
and succeed, except the import check, which exits with $CHECK_RC."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

STUB = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
case "$*" in
  *"import dlas, tvm, torch"*) exit "${CHECK_RC:-0}" ;;
  *sysconfig*) echo "$STUB_SITE" ;;
esac
exit 0
"""


def _stub_venv(tmp: Path) -> Path:
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "uv"):
        tool = venv / "bin" / name
        tool.write_text(STUB)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return venv


def _run_setup(venv: Path, *args: str, check_rc: int = 0) -> subprocess.CompletedProcess[str]:
    """scripts/setup.sh on the stub environment, its calls logged afresh."""
    log = venv / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "DLAS_VENV": str(venv), "PYTHON": str(venv / "bin" / "python"),
           "STUB_LOG": str(log), "STUB_SITE": str(venv / "site"), "CHECK_RC": str(check_rc)}
    return subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def _setup(venv: Path, *args: str) -> tuple[str, list[str]]:
    """A set-up that succeeds: its output and the import checks it ran."""
    done = _run_setup(venv, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    log = venv / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    return done.stdout, [c for c in calls if "import dlas, tvm, torch" in c]


def _stamps(venv: Path) -> list[str]:
    return sorted(p.name.rsplit("-", 1)[-1] if p.name.count("-") > 2 else "stamp"
                  for p in venv.glob(".dlas-setup-*"))


def test_run_leaves_the_check_to_the_command_and_the_next_set_up_checks(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path)
    out, checks = _setup(venv, "run")
    assert "environment ready" in out and checks == []
    assert _stamps(venv) == ["unchecked"]
    out, checks = _setup(venv, "run")      # the second quickstart: checked once, no set-up
    assert len(checks) == 1 and "setting up" not in out
    assert _stamps(venv) == ["stamp"]
    out, checks = _setup(venv)             # set up and checked: nothing to do
    assert out == "" and checks == []


def test_a_plain_set_up_checks_before_its_stamp(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path)
    out, checks = _setup(venv)
    assert "environment ready" in out and len(checks) == 1
    assert _stamps(venv) == ["stamp"]


def test_an_unchecked_environment_that_does_not_import_is_set_up_again(tmp_path: Path) -> None:
    venv = _stub_venv(tmp_path)
    _setup(venv, "run")
    done = _run_setup(venv, "run", check_rc=1)
    # set up again, and this time checked before the command (which fails the same way)
    assert "does not import (set up again)" in done.stdout
    assert "setting up" in done.stdout
    assert done.returncode != 0
    assert _stamps(venv) == []
