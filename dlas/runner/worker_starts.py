"""Where a timing group's worker process comes from: started fresh, or a spare that
imported beside an earlier one.

Why: a timing worker spends its first 2.4-2.7 s (Zen 4) importing PyTorch, TVM and ONNX
Runtime on one core, while the machine's other cores idle: a timing holds the machine
alone, so nothing else runs meanwhile. The quickstart starts six (two models, three
passes), about 15 s of its 170. A worker can import before it is given its request, so
when a run has another group to time, a spare starts beside the worker the group needs;
the two import at once, on two cores, and the spare then waits, idle, for the next group.
Six imports then cost the wall time of three. The next group may be the next timing pass's
first (`dlas.runner.passes`): a pass's last group, if its worker starts fresh, starts a
spare for it, which the runner keeps across the passes. A sweep of one model in three
passes then imports in the wall time of two, not three (the spare's 2.5-3 s saved).

What stays as it was:
- every group is timed in a process of its own that has timed nothing before: a spare
  serves one group, and is started by exec like any worker, so its address layout is drawn
  afresh (a fork of one imported process would give every group the same layout);
- no import runs beside a timing: a group's worker gets its request only once every
  process started with it has finished importing, and a spare imports nothing more
  (`dlas.runner.timing_worker --wait`);
- a spare started for other settings (its environment: thread count, interpreter) is
  stopped, not used.

The protocol: `python -m dlas.runner.timing_worker --wait` imports, prints
`{"event": "ready"}`, and reads one line from its stdin: the JSON list `[REQUEST, RESULT]`,
so that paths of any characters travel (a tab or a newline in the temporary folder's name).
At the end of its input it exits without timing. `DLAS_SPARE_TIMING_WORKERS=0` turns spares
off.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: The worker's argument that makes it import, say so, and wait for its request.
WAIT_ARG = "--wait"
#: The environment variable that turns spares off ("0").
ENV = "DLAS_SPARE_TIMING_WORKERS"
#: Seconds a worker gets to stop after SIGTERM (or a spare after the end of its input)
#: before it is killed.
STOP_GRACE_S = 5.0


def spare_count() -> int:
    """Spares to start beside a worker when the run has another group to time: one on a
    machine of two cores or more (a second spare would import beside the first on a
    2-core machine, and a group needs only the next one), none on one core or with
    `DLAS_SPARE_TIMING_WORKERS=0`."""
    from dlas.targets.host import available_cores

    if os.environ.get(ENV, "").strip() == "0":
        return 0
    return 1 if available_cores() >= 2 else 0


def worker_env(threads: int | None) -> dict[str, str]:
    """The worker's environment: this dlas first on the path, TVM's thread count set
    (the worker pins the threads itself)."""
    import dlas

    env = dict(os.environ)
    root = str(Path(dlas.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    if threads:
        env["TVM_NUM_THREADS"] = str(threads)
    return env


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The worker gets SIGTERM if the sweep's process dies (even by SIGKILL)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def start_worker(python: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """A worker process that imports and waits for its request on stdin."""
    return subprocess.Popen(
        [python, "-m", "dlas.runner.timing_worker", WAIT_ARG],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)


def await_ready(proc: subprocess.Popen[str]) -> bool:
    """Read the worker's output until it says it has imported: True, or False when its
    output ended first (it died)."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            return False
        line = line.strip()
        if not line.startswith("{"):
            continue  # a runtime printing on its own
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "ready":
            return True


def hand_request(proc: subprocess.Popen[str], request: Path, result: Path) -> None:
    """Give a waiting worker its request; if it is gone, nothing (its exit code says
    why)."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps([str(request), str(result)]) + "\n")
        proc.stdin.close()
    except OSError:  # BrokenPipeError: it died meanwhile
        pass


def stop(proc: subprocess.Popen[str]) -> None:
    """Stop a worker: SIGTERM, then SIGKILL after `STOP_GRACE_S`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def release(proc: subprocess.Popen[str]) -> None:
    """Let an unused spare go: the end of its input ends it; stopped if it lingers."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(STOP_GRACE_S)
    except (OSError, subprocess.TimeoutExpired):
        stop(proc)


@dataclass
class _Spare:
    proc: subprocess.Popen[str]
    #: The interpreter and environment it was started with.
    settings: tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class WorkerStarts:
    """The workers of one run's timing groups, or of a run in timing passes (see module
    doc). `spares`: how many to start beside a fresh worker; the run sets it before each
    group (0 for its last, unless another pass follows)."""

    spares: int = 0
    _ready: list[_Spare] = field(default_factory=list)

    def worker(self, python: str, env: dict[str, str]) -> subprocess.Popen[str]:
        """A worker that has imported and waits for its request (or has died: its exit
        code says so once its request cannot be handed over)."""
        settings = (python, tuple(sorted(env.items())))
        while self._ready:
            spare = self._ready.pop(0)
            if spare.settings == settings and spare.proc.poll() is None:
                return spare.proc
            release(spare.proc)
        procs = [start_worker(python, env) for _ in range(1 + self.spares)]
        try:
            await_ready(procs[0])
            for proc in procs[1:]:  # a spare's import must not run beside the timing
                if await_ready(proc):
                    self._ready.append(_Spare(proc, settings))
                else:
                    stop(proc)
        except BaseException:  # Ctrl-C meanwhile: none of them outlives the run
            for proc in procs:
                stop(proc)
            raise
        return procs[0]

    def close(self) -> None:
        """Let the spares nobody used go."""
        while self._ready:
            release(self._ready.pop().proc)
