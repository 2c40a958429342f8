"""`dlas.fast_exit`: the console script ends without the interpreter's teardown, yet keeps
what a normal exit does that matters (exit functions, flushed output, running threads)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import entry_points


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60)


def test_exit_functions_run_and_buffered_output_arrives_with_the_code() -> None:
    done = _run("""
        import atexit, sys
        from dlas.fast_exit import exit_now
        atexit.register(lambda: print("exit function ran"))
        print("x" * 100_000)           # a pipe buffers this: lost unless flushed
        sys.stderr.write("to stderr")
        exit_now(3)
        print("never")
    """)
    assert done.returncode == 3
    assert done.stdout == "x" * 100_000 + "\nexit function ran\n"
    assert done.stderr == "to stderr"


def test_a_running_thread_is_waited_for() -> None:
    done = _run("""
        import threading, time
        from dlas.fast_exit import exit_now
        def work():
            time.sleep(0.3)
            print("thread finished", flush=True)
        threading.Thread(target=work).start()
        exit_now(None)
    """)
    assert done.returncode == 0
    assert done.stdout == "thread finished\n"


def test_the_console_script_and_module_exit_through_it() -> None:
    (script,) = entry_points(group="console_scripts", name="dlas")
    assert script.value == "dlas.cli:entry"
    done = subprocess.run([sys.executable, "-m", "dlas.cli", "results", "--workspace",
                           "/nonexistent/dlas-ws"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "no results database" in done.stdout
