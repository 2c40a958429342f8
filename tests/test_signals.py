"""SIGTERM handled like Ctrl-C (`dlas.runner.signals`), in this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from dlas.runner.signals import sigterm_as_interrupt


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


@pytest.fixture
def default_sigterm():
    """The disposition a command starts with, whatever the harness gave this process."""
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_raises_keyboard_interrupt_and_new_children_are_stopped(
        default_sigterm: None) -> None:
    older = _sleeper()  # not the command's: it stays
    try:
        with pytest.raises(KeyboardInterrupt):
            with sigterm_as_interrupt() as interrupts:
                assert interrupts.installed
                newer = _sleeper()
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
        assert interrupts.received == "SIGTERM"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
        assert interrupts.stop_children(grace_s=5) == [newer.pid]
        assert not psutil.pid_exists(newer.pid)  # ended and reaped
        assert older.poll() is None
    finally:
        for proc in (older, locals().get("newer")):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_an_ignored_sigterm_stays_ignored(default_sigterm: None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with sigterm_as_interrupt() as interrupts:
        assert not interrupts.installed
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # nothing happens
    assert interrupts.received is None


# --- an interrupt a library did not let through is still an interrupt ----------------------

@pytest.fixture(params=["converted", "swallowed"])
def interrupt_eating_algorithm(request: pytest.FixtureRequest):
    """An algorithm whose construction gets SIGTERM and, like a TVM callback, turns the
    KeyboardInterrupt into a RuntimeError ("converted") or drops it ("swallowed")."""
    from dlas import registry

    def build(params):  # noqa: ANN001, ANN202
        from dlas.algorithms.direct import DirectConv

        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except KeyboardInterrupt:
            if request.param == "converted":
                raise RuntimeError("SIGTERM") from None
        return DirectConv()

    name = f"test_eats_interrupt_{request.param}"
    registry.register("algorithms", name, description="test-only")(build)
    yield name
    registry.unregister("algorithms", name)


def test_an_interrupt_a_library_ate_is_not_a_failure(
        tmp_path, shared_cache, default_sigterm: None,  # noqa: ANN001
        interrupt_eating_algorithm: str) -> None:
    from dlas.results.store import ResultStore
    from dlas.runner.runner import Runner
    from dlas.runner.workspace import Workspace
    from dlas.sweep.config import parse_config
    from tests.conftest import tiny_sweep

    config = parse_config(tiny_sweep(algorithms=[interrupt_eating_algorithm]))
    with sigterm_as_interrupt():
        report = Runner(Workspace(tmp_path / "ws"), progress=False).run(config)
    assert report.interrupted and report.failed == 0 and report.computed["compile"] == 0
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        assert store.rows() == []  # no failure recorded: the next run computes the point
    assert not list((tmp_path / "ws" / "cache" / "compile").glob("*/meta.json"))


DRIVER = """
import os, signal, subprocess, sys, time
sys.path.insert(0, {root!r})
from dlas.runner.signals import sigterm_as_interrupt
# code that, by its file name, belongs to a MetaSchedule session
tuning = compile("os.kill(os.getpid(), signal.SIGTERM)\\ntime.sleep(30)",
                 {file!r}, "exec")
with sigterm_as_interrupt():
    # a child the command started (a builder pool's worker, say)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("child", child.pid, flush=True)
    try:
        exec(tuning)
    except KeyboardInterrupt:
        print("raised", flush=True)
"""


def test_sigterm_inside_metaschedule_ends_the_process_at_once(tmp_path) -> None:  # noqa: ANN001
    """Raising there can make TVM call std::terminate; the process ends cleanly instead."""
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    file = os.path.join("tvm", "s_tir", "meta_schedule", "task_scheduler.py")
    proc = subprocess.run([sys.executable, "-c", DRIVER.format(root=root, file=file)],
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "raised" not in proc.stdout
    assert "interrupted: completed stages are cached" in proc.stdout
    assert "stopped by SIGTERM during MetaSchedule tuning" in proc.stdout
    child = int(proc.stdout.split()[1])
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
