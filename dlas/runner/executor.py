"""The DAG executor core: a point's stages run in graph order, each entry computed once.

- An entry in the cache is loaded, never recomputed; within one run each entry is
  produced at most once and shared by every point that needs it.
- An entry whose files differ from the manifest written with them (`Cache.check`) is
  never used: it is reported, discarded under its claim and computed as if missing.
- Across processes on one workspace, an entry is computed under its claim
  (`dlas.runner.claims`): a process that needs an entry another one is computing waits for
  it and loads it.
- A stage that computes holds the machine lock (`dlas.runner.machine`) as its resources
  ask: shared for work, exclusive for timings.
- A stage that fails is remembered: every dependant point fails with it, without a retry.
  An error raised after the command was interrupted (Ctrl-C, SIGTERM) is the interrupt,
  as a library passed it on (`dlas.runner.signals.interrupted`), not a failure.

Stages only declare what they read (`Stage.needs`); the executor resolves it, so a stage's
upstream is ensured (stored) before the stage's claim is taken, and models are loaded only
when a computing stage reads them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dlas.runner.cache import Cache
from dlas.runner.claims import Claims, Holder
from dlas.runner.machine import MachineLock
from dlas.runner.signals import interrupted
from dlas.stages import BY_NAME
from dlas.stages.base import Inputs, Job, Stage, StageEnv, StoredStage, TransientStage
from dlas.stages.facts import Facts
from dlas.stages.keys import StageKeys
from dlas.sweep.grid import Point

F = TypeVar("F", bound=Facts)
Out = TypeVar("Out")


class StageFailed(Exception):
    """A stage raised; carries which stage, for the record and for dependants."""

    def __init__(self, stage: str, error: BaseException, tb: str) -> None:
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage, self.error, self.tb = stage, error, tb

    @property
    def message(self) -> str:
        """The error as a row records it: its type and text."""
        return f"{type(self.error).__name__}: {self.error}"


@dataclass
class StageTally:
    """What the executor did, per stage: entries computed here, entries reused (from the
    cache, or computed meanwhile by another process), seconds spent computing, and
    entries found damaged (then computed again, so also counted as computed)."""

    computed: Counter[str] = field(default_factory=Counter)
    reused: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    damaged: Counter[str] = field(default_factory=Counter)


class StageExecutor:
    def __init__(self, cache: Cache, env: StageEnv, tally: StageTally, *,
                 claims: Claims | None = None, machine: MachineLock | None = None) -> None:
        self.cache, self.env, self.tally = cache, env, tally
        self.claims, self.machine = claims, machine
        self._facts: dict[tuple[str, str], Any] = {}
        self._outputs: dict[tuple[str, str], Any] = {}
        self._damaged: set[tuple[str, str]] = set()
        self._said_unverified = False

    @property
    def console(self) -> Any:
        return self.env.console

    # -- the two ways a stage is asked for --------------------------------------------

    def facts(self, point: Point, keys: StageKeys, stage: StoredStage[F, Any]) -> F:
        """The entry's facts, computing the entry (and its upstream) if it is missing."""
        key = keys[stage.name]
        return self._once(self._facts, stage.name, key,
                          lambda: self._ensure(point, keys, stage, key))

    def output(self, point: Point, keys: StageKeys, stage: Stage[Out]) -> Out:
        """The entry's typed output (loaded once per run)."""
        key = keys[stage.name]
        if isinstance(stage, TransientStage):
            return self._once(self._outputs, stage.name, key,
                              lambda: self._build(point, stage, key))
        assert isinstance(stage, StoredStage)
        facts = self.facts(point, keys, stage)
        return self._once(self._outputs, stage.name, key,
                          lambda: stage.load(self.cache.path(stage.name, key), facts))

    # -- machinery --------------------------------------------------------------------

    @staticmethod
    def _once(memo: dict[tuple[str, str], Any], name: str, key: str,
              produce: Callable[[], Any]) -> Any:
        """Produce a value once per run; a failure is remembered and raised again for
        every dependant instead of being retried."""
        if (name, key) in memo:
            value = memo[(name, key)]
            if isinstance(value, StageFailed):
                raise value
            return value
        try:
            value = produce()
        except (KeyboardInterrupt, StageFailed):
            raise
        except Exception as exc:
            if interrupted():  # a library turned the KeyboardInterrupt into its own error
                raise KeyboardInterrupt(interrupted()) from exc
            failure = StageFailed(name, exc, traceback.format_exc())
            memo[(name, key)] = failure
            raise failure from exc
        memo[(name, key)] = value
        return value

    def _build(self, point: Point, stage: TransientStage[Out], key: str) -> Out:
        start = time.perf_counter()
        value = stage.build(point, self.env)
        self.console.stage(stage.name, "loaded", key, self._computed(stage.name, start))
        return value

    def _computed(self, name: str, start: float) -> float:
        elapsed = time.perf_counter() - start
        self.tally.computed[name] += 1
        self.tally.seconds[name] += elapsed
        return elapsed

    def _reused(self, stage: StoredStage[F, Any], key: str, how: str) -> F:
        self.tally.reused[stage.name] += 1
        self.console.stage(stage.name, how, key)
        return stage.read_facts(self.cache.meta(stage.name, key))

    def _stored(self, name: str, key: str, *, discard_damaged: bool) -> bool:
        """Whether the entry is stored and may be used. A damaged entry is reported once
        per run and, when `discard_damaged` (under the entry's claim, so no other process
        is writing it), discarded, so that it is computed as if it were missing."""
        check = self.cache.check(name, key)
        if check.damaged:
            if (name, key) not in self._damaged:
                self._damaged.add((name, key))
                self.tally.damaged[name] += 1
                self.console.damaged(check)
            if discard_damaged:
                self.cache.discard(name, key)
            return False
        if check.unverified and not self._said_unverified:
            self._said_unverified = True
            self.console.note(f"note: cache entries written before dlas kept checksums (the "
                              f"first: {name} {key[:10]}) are used unverified")
        return check.present

    def _ensure(self, point: Point, keys: StageKeys, stage: StoredStage[F, Any],
                key: str) -> F:
        if self._stored(stage.name, key, discard_damaged=False):
            return self._reused(stage, key, "reused")
        # upstream first: its failure is its own, and no claim is held while it computes
        parent = BY_NAME[stage.parent] if stage.parent else None
        if isinstance(parent, StoredStage):
            self.facts(point, keys, parent)
        elif parent is not None:
            self.output(point, keys, parent)
        with self._claim(stage.name, key):
            if self._stored(stage.name, key, discard_damaged=True):
                return self._reused(stage, key, "shared")  # another process computed it
            return self._compute(point, keys, stage, key)

    def _claim(self, stage: str, key: str) -> contextlib.AbstractContextManager[None]:
        if self.claims is None:
            return contextlib.nullcontext()

        def waiting(holder: Holder | None) -> None:
            by = f" ({holder.describe()})" if holder else ""
            self.console.note(f"waiting for {stage} {key[:10]}: another dlas process is "
                              f"computing it{by}")

        return self.claims.hold(stage, key, waiting)

    def _compute(self, point: Point, keys: StageKeys, stage: StoredStage[F, Any],
                 key: str) -> F:
        resources = stage.resources_for(point)
        hold = (self.machine.hold(resources, lambda what: self.console.note(f"waiting: {what}"))
                if self.machine is not None else contextlib.nullcontext())
        with hold:
            self.console.stage(stage.name, "running", key)
            inputs = Inputs(stage, lambda s: self.output(point, keys, s),
                            lambda s: self.facts(point, keys, s))
            meta: dict[str, Any] = {"stage": stage.name, "key": key}
            began, start = time.time(), time.perf_counter()
            with self.cache.write(stage.name, key, meta) as tmp:
                job = Job(point, key, inputs, self.env, tmp,
                          scratch=lambda: self.cache.scratch(stage.name, key))
                facts = stage.compute(job)
                if interrupted():  # the interrupt was swallowed on the way: not a result
                    raise KeyboardInterrupt(interrupted())
                facts.seconds = time.perf_counter() - start
                meta.update(facts.to_meta(), computed_by={
                    "host": socket.gethostname(), "pid": os.getpid(),
                    "span": [began, time.time()], "exclusive": resources.exclusive})
        self.console.stage(stage.name, "done", key, self._computed(stage.name, start))
        return facts
