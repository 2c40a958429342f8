"""Untuned compiles of a sweep's later points on spare cores, while the sweep's own
process works on the current point (the helper: `python -m dlas.runner.compile_ahead`).

Why: an untuned compile is one thread (TVM's lowering, then LLVM: 3-10 s per point for the
quickstart's models on a Zen 1), and the local executor computes stages one after another,
so on a machine with two cores or more the others idled through every compile.

How (`dlas.runner.runner` drives it): when the executor is about to compute an untuned
compile itself, it hands each idle helper the list of later points whose compile is due
(their imported model already stored), in the sweep's order. The helper walks the list and
computes each compile nobody has claimed or stored, while the executor computes its own
points in the same order, so the two meet in the middle: each takes the next free compile
when it finishes one, and neither idles while the other has two left. (Handing one compile
at a time left the helper idle from the end of its compile to the executor's next one: on
the Zen 4 it did 2 of a pruned MobileNetV2's 6 compiles, 6.9 s against the executor's
13.7.) A helper computes each entry through the same stage executor, under the entry's
claim and the shared machine lock, so:
- no entry is computed twice (`dlas.runner.claims`), and a timing never runs beside a
  helper (the machine lock is exclusive for timings);
- a compile that tunes is never handed over: it times candidates on this machine;
- nothing upstream is ever computed by a helper (it is only given points whose import is
  stored), so training keeps the machine to itself;
- the executor times a model's group only once the helpers have stored its compiles, so
  the group's variants stay interleaved in one timing run;
- a helper that fails or dies changes only the speed: the point is computed here, and a
  compile that fails fails here again, with its own traceback.

`DLAS_COMPILE_AHEAD=0` turns helpers off; `DLAS_COMPILE_AHEAD=N` allows N. By default a
run has one per core beyond the first, at most `MAX_HELPERS`, started only when it has at
least two untuned compiles to do.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlas.runner.cache import Cache
from dlas.runner.claims import POLL_S, Claims
from dlas.stages.compile import COMPILE, tunes
from dlas.stages.keys import StageKeys
from dlas.sweep.grid import Point

#: Helpers at most, whatever the core count (each holds TVM and a model in memory).
MAX_HELPERS = 4
#: The environment variable that sets the number of helpers (0: none).
ENV = "DLAS_COMPILE_AHEAD"
#: Seconds a helper gets to finish its compile when the run ends, before it is stopped.
STOP_GRACE_S = 5.0
#: Seconds one compile may take in a helper before the helper is stopped (a hang must not
#: hold the run, which waits for its helpers before heavy work and timings; the largest
#: untuned compile seen, DenseNet161 at 224x224, takes about 90 s on a Zen 1).
TASK_LIMIT_S = 1800.0


def helper_count(cores: int | None = None) -> int:
    """Helpers a run may start: `DLAS_COMPILE_AHEAD`, else one per core beyond the first
    (the cores this process may use), at most `MAX_HELPERS`."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        if not raw.isdigit():
            raise ValueError(f"{ENV}={raw!r}: give a whole number of compile helpers (0: "
                             "none; unset: one per core beyond the first)")
        return int(raw)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    return max(0, min(cores - 1, MAX_HELPERS))


def compile_wanted(cache: Cache, point: Point, keys: StageKeys) -> bool:
    """Whether the point has an untuned compile that is not stored yet."""
    return (not point.is_baseline and not tunes(point) and COMPILE.name in keys
            and not cache.has(COMPILE.name, keys[COMPILE.name]))


def compile_due(cache: Cache, point: Point, keys: StageKeys) -> bool:
    """Whether the point's next stored stage is an untuned compile that can start now:
    wanted (`compile_wanted`), its imported model stored (so nothing upstream is
    computed)."""
    parent = COMPILE.parent
    assert parent is not None
    return compile_wanted(cache, point, keys) and cache.has(parent, keys[parent])


@dataclass
class _Helper:
    proc: subprocess.Popen[str]
    events: queue.Queue[dict[str, Any]]
    #: The list of compiles in flight (None: idle).
    task: str | None = None
    #: The compile key the helper is computing from its list (None: between two), and
    #: since when (monotonic seconds).
    current: str | None = None
    since: float = 0.0
    #: The first compile of the list, the helper's until it starts one: the run leaves it
    #: to the helper even while the helper is still starting (a list it reads late would
    #: otherwise find every compile taken).
    reserved: str | None = None


class CompileAhead:
    """The executor's side: helpers started, compiles handed to them, their state."""

    def __init__(self, cache: Cache, workspace_root: Path, machine_dir: Path,
                 helpers: int) -> None:
        self.cache, self.claims = cache, Claims(cache.root)
        self._dir = Path(tempfile.mkdtemp(prefix="dlas-ahead-"))
        self._count = 0
        self._helpers = [self._start(workspace_root, machine_dir) for _ in range(helpers)]

    # -- what the executor asks -------------------------------------------------------

    @property
    def pids(self) -> set[int]:
        return {h.proc.pid for h in self._helpers}

    def holds(self, key: str) -> bool:
        """Whether a helper is computing this compile now, or has it first on the list it
        has not started."""
        self.poll()
        return any(key in (h.current, h.reserved) for h in self._helpers)

    def busy(self) -> bool:
        """Whether any helper has a list of compiles in flight."""
        self.poll()
        return any(h.task is not None for h in self._helpers)

    def drain(self) -> None:
        """Wait until no helper has a compile in flight."""
        while self.busy():
            time.sleep(POLL_S)

    def offer(self, candidates: Sequence[tuple[Point, StageKeys]]) -> None:
        """Hand each idle helper the due compiles (`compile_due`, not claimed), in order:
        the first helper all of them, the next from the second on, and so on (each
        reserves a compile of its own), sharing what their lists have in common through
        the claims."""
        self.poll()
        idle = [h for h in self._helpers if h.task is None and h.proc.poll() is None]
        if not idle:
            return
        due = [(point, keys) for point, keys in candidates
               if compile_due(self.cache, point, keys)
               and not self.claims.is_held(COMPILE.name, keys[COMPILE.name])]
        for start, helper in enumerate(idle[:len(due)]):
            self._send(helper, due[start:])

    def poll(self) -> None:
        """Take in what the helpers said: a started compile is the helper's current one, a
        finished list frees the helper; a helper that died is idle for good (its claim
        died with it)."""
        for helper in self._helpers:
            while True:
                try:
                    event = helper.events.get_nowait()
                except queue.Empty:
                    break
                kind = event.get("event")
                if kind == "start" and helper.task is not None:
                    helper.current, helper.since = event.get("key"), time.monotonic()
                    helper.reserved = None
                elif kind == "computed" and event.get("key") == helper.current:
                    helper.current = None
                elif kind == "done" and event.get("key") == helper.task:
                    helper.task = helper.current = helper.reserved = None
            if helper.current is not None and time.monotonic() - helper.since > TASK_LIMIT_S:
                helper.proc.kill()  # hung: its claim dies with it, the run computes it
                helper.proc.wait()
            if helper.proc.poll() is not None:
                helper.task = helper.current = helper.reserved = None

    def close(self) -> None:
        """Stop the helpers (a compile in flight gets `STOP_GRACE_S` to finish)."""
        for helper in self._helpers:
            try:
                if helper.proc.stdin is not None:
                    helper.proc.stdin.close()
            except OSError:
                pass
        for helper in self._helpers:
            try:
                helper.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                helper.proc.terminate()
                try:
                    helper.proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    helper.proc.kill()
                    helper.proc.wait()
        for path in self._dir.glob("*"):
            path.unlink(missing_ok=True)
        self._dir.rmdir()

    # -- machinery --------------------------------------------------------------------

    def _start(self, workspace_root: Path, machine_dir: Path) -> _Helper:
        from dlas.runner.worker_starts import die_with_parent, worker_env

        env = worker_env(1)
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "dlas.runner.compile_ahead", str(self.cache.root),
             str(workspace_root), str(machine_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env,
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
        events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=_read_events, args=(proc, events), daemon=True).start()
        return _Helper(proc, events)

    def _send(self, helper: _Helper, items: Sequence[tuple[Point, StageKeys]]) -> None:
        import cloudpickle

        self._count += 1
        task = f"list-{self._count}"
        path = self._dir / f"{task}.pkl"
        path.write_bytes(cloudpickle.dumps(list(items)))
        try:
            assert helper.proc.stdin is not None
            helper.proc.stdin.write(json.dumps({"task": str(path), "key": task}) + "\n")
            helper.proc.stdin.flush()
        except OSError:  # it died: the executor computes the points itself
            path.unlink(missing_ok=True)
            return
        helper.task, helper.current = task, None
        helper.reserved = items[0][1][COMPILE.name] if items else None


def _read_events(proc: subprocess.Popen[str], events: queue.Queue[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.strip()
        if line.startswith("{"):
            try:
                events.put(json.loads(line))
            except ValueError:
                continue


# -- the helper's own process ---------------------------------------------------------


def serve(cache_root: Path, workspace_root: Path, machine_dir: Path) -> None:
    """Walk each list read from stdin (a pickled list of (point, keys)), computing every
    compile still due that nobody has claimed; say which one it starts, and when the list
    is done."""
    import io

    import cloudpickle
    from rich.console import Console

    from dlas import registry
    from dlas.runner.console import RunConsole
    from dlas.runner.executor import EntryBusy, StageExecutor, StageFailed
    from dlas.runner.machine import MachineLock
    from dlas.runner.workspace import StageTally
    from dlas.stages.base import StageEnv

    registry.load_plugins()
    import dlas.compiler.build  # noqa: F401 - TVM loaded while idle, not in the first task

    cache = Cache(cache_root)
    console = RunConsole(progress=False, console=Console(file=io.StringIO()))
    claims = Claims(cache.root)
    executor = StageExecutor(cache, StageEnv(workspace_root, console, False), StageTally(),
                             claims=claims, machine=MachineLock(machine_dir),
                             wait_for_claims=False)

    def say(**event: Any) -> None:
        print(json.dumps(event), flush=True)

    for line in sys.stdin:
        task = json.loads(line)
        path = Path(task["task"])
        try:
            items = cloudpickle.loads(path.read_bytes())
        except Exception:  # noqa: BLE001 - an unreadable list: the executor computes them
            items = []
        finally:
            path.unlink(missing_ok=True)
        for point, keys in items:
            key = keys[COMPILE.name]
            if not compile_due(cache, point, keys) or claims.is_held(COMPILE.name, key):
                continue
            outcome = "computed"
            say(event="start", key=key)
            try:
                executor.facts(point, keys, COMPILE)
            except EntryBusy:
                outcome = "busy"  # the executor claimed it first
            except StageFailed:
                outcome = "failed"  # the executor computes it again and reports it
            except Exception as exc:  # noqa: BLE001 - any failure leaves it to the executor
                outcome = f"error: {type(exc).__name__}"
            say(event="computed", key=key, outcome=outcome)
        say(event="done", key=task["key"])


if __name__ == "__main__":  # pragma: no cover - the helper's process
    from dlas.fast_exit import exit_now

    try:
        serve(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    except KeyboardInterrupt:
        sys.exit(130)
    # the run waits for its helpers to end (`CompileAhead.close`): without the teardown of
    # the TVM modules and models it compiled (`dlas.fast_exit`)
    exit_now(0)
