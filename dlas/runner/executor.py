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
from collections.abc import Callable
from typing import Any, TypeVar

from dlas.runner.cache import Cache
from dlas.runner.claims import Claims, Holder
from dlas.runner.machine import MachineLock
from dlas.runner.placement_waits import PlacementWaits
from dlas.runner.signals import interrupted
from dlas.runner.worker_starts import WorkerStarts
from dlas.runner.workspace import StageTally
from dlas.stages import BY_NAME
from dlas.stages.base import Inputs, Job, Stage, StageEnv, StoredStage, TransientStage
from dlas.stages.facts import Facts, MeasureFacts
from dlas.stages.keys import StageKeys
from dlas.stages.timed import TimedStage
from dlas.sweep.grid import Point

F = TypeVar("F", bound=Facts)
Out = TypeVar("Out")


class EntryBusy(Exception):
    """Another process holds the claim of an entry this one needs: the caller may move on
    to other work and come back (`StageExecutor(wait_for_claims=False)`)."""

    def __init__(self, stage: str, key: str, holder: Holder | None) -> None:
        by = f" ({holder.describe()})" if holder else ""
        super().__init__(f"{stage} {key[:10]} is being computed by another dlas process{by}")
        self.stage, self.key, self.holder = stage, key, holder


class StageFailed(Exception):
    """A stage raised; carries which stage, for the record and for dependants."""

    def __init__(self, stage: str, error: BaseException, tb: str) -> None:
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage, self.error, self.tb = stage, error, tb

    @property
    def message(self) -> str:
        """The error as a row records it: its type and text."""
        return f"{type(self.error).__name__}: {self.error}"


class StageExecutor:
    def __init__(self, cache: Cache, env: StageEnv, tally: StageTally, *,
                 claims: Claims | None = None, machine: MachineLock | None = None,
                 wait_for_claims: bool = True, timing_source: str = "sweep") -> None:
        self.cache, self.env, self.tally = cache, env, tally
        self.claims, self.machine = claims, machine
        #: False: an entry another process is computing raises `EntryBusy` instead of
        #: waiting for it, so the caller can do other work meanwhile.
        self.wait_for_claims = wait_for_claims
        #: What timing runs record as their source ("sweep", "remeasure").
        self.timing_source = timing_source
        self._facts: dict[tuple[str, str], Any] = {}
        self._outputs: dict[tuple[str, str], Any] = {}
        self._damaged: set[tuple[str, str]] = set()
        self._said_unverified = False
        #: Pids of this run's compile helpers: what they stored counts as computed here.
        self.helper_pids: set[int] = set()
        #: Where timing groups get their workers (`dlas.runner.worker_starts`); None: a
        #: fresh worker each, with no spare (the runner sets one for its run).
        self.worker_starts: WorkerStarts | None = None
        #: What the run's timing groups learnt of waiting for near placement; None: every
        #: group waits its planned share (the runner sets one for its series of runs).
        self.placement_waits: PlacementWaits | None = None

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
        except (KeyboardInterrupt, StageFailed, EntryBusy):
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

    def is_helper(self, pid: object, host: object) -> bool:
        """Whether the process `pid` on `host` is one of this run's compile helpers."""
        return pid in self.helper_pids and host == socket.gethostname()

    def _computed(self, name: str, start: float) -> float:
        elapsed = time.perf_counter() - start
        self.tally.computed[name] += 1
        self.tally.seconds[name] += elapsed
        return elapsed

    def _reused(self, stage: StoredStage[F, Any], key: str, how: str) -> F:
        meta = self.cache.meta(stage.name, key)
        facts = stage.read_facts(meta)
        by = meta.get("computed_by") or {}
        if self.is_helper(by.get("pid"), by.get("host")):
            # computed for this run by its own helper (`dlas.runner.compile_ahead`)
            self.tally.computed[stage.name] += 1
            self.tally.seconds[stage.name] += facts.seconds or 0.0
            self.console.stage(stage.name, "ahead", key, facts.seconds or 0.0)
            return facts
        self.tally.reused[stage.name] += 1
        self.console.stage(stage.name, how, key)
        return facts

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
        if not self.wait_for_claims and self.claims is not None \
                and self.claims.is_held(stage.name, key):
            raise EntryBusy(stage.name, key, self.claims.holder(stage.name, key))
        with self._claim(stage.name, key):
            if self._stored(stage.name, key, discard_damaged=True):
                return self._reused(stage, key, "shared")  # another process computed it
            if isinstance(stage, TimedStage):  # a group of one, in the timing worker
                outcome = self._time_claimed([(point, keys, stage, key)])[0]
                if isinstance(outcome, StageFailed):
                    raise outcome
                return outcome  # type: ignore[return-value]
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

    # -- timing groups ----------------------------------------------------------------

    def timings(self, items: list[tuple[Point, StageKeys]], title: str
                ) -> list[MeasureFacts | StageFailed | EntryBusy]:
        """The timing entries (`measure`, `baseline`) of a model's variants, those missing
        computed together in one timing worker (`dlas.runner.timing_groups`).

        Per item: its facts; the `StageFailed` of its stage or an upstream one; or
        `EntryBusy` when another process holds its claim (that process times it; come
        back for it later). Claims are only ever tried, never waited for, so two
        processes timing overlapping groups cannot wait on each other.
        """
        from dlas.stages.chains import result_stage

        out: list[Any] = [None] * len(items)
        todo: list[tuple[int, Point, StageKeys, TimedStage, str, Any]] = []
        for i, (point, keys) in enumerate(items):
            stage = result_stage(point)
            key = keys[stage.name]
            memo = self._facts.get((stage.name, key))
            if memo is not None:
                out[i] = memo
                continue
            try:
                if self._stored(stage.name, key, discard_damaged=False):
                    out[i] = self.facts(point, keys, stage)
                    continue
                parent = BY_NAME[stage.parent or ""]
                assert isinstance(parent, StoredStage)
                self.facts(point, keys, parent)
            except (StageFailed, EntryBusy) as exc:
                out[i] = exc
                continue
            claim = self.claims.try_hold(stage.name, key) if self.claims else None
            if self.claims is not None and claim is None:
                out[i] = EntryBusy(stage.name, key, self.claims.holder(stage.name, key))
                continue
            if self._stored(stage.name, key, discard_damaged=True):  # stored meanwhile
                if claim is not None:
                    claim.release()
                out[i] = self.facts(point, keys, stage)
                continue
            todo.append((i, point, keys, stage, key, claim))
        try:
            if todo:
                got = self._time_claimed([(p, k, st, key) for _, p, k, st, key, _ in todo],
                                         title)
                for (i, *_rest), outcome in zip(todo, got, strict=True):
                    out[i] = outcome
        finally:
            for *_rest, claim in todo:
                if claim is not None:
                    claim.release()
        return out

    def _time_claimed(self, entries: list[tuple[Point, StageKeys, TimedStage, str]],
                      title: str | None = None) -> list[MeasureFacts | StageFailed]:
        """Time entries whose claims this process holds, in one worker; store each."""
        from dlas.runner.timing_groups import (
            MemberResult,
            TimingMember,
            WorkerEvents,
            group_request,
            group_title,
            time_group,
        )
        from dlas.stages.timed import subject_label

        first = entries[0][0]
        resources = entries[0][2].resources_for(first)
        hold = (self.machine.hold(resources, lambda what: self.console.note(f"waiting: {what}"))
                if self.machine is not None else contextlib.nullcontext())
        results: list[MeasureFacts | StageFailed] = []
        with hold, contextlib.ExitStack() as stack:
            writers, members = [], []
            for point, keys, stage, key in entries:
                meta: dict[str, Any] = {"stage": stage.name, "key": key}
                ctx = self.cache.write(stage.name, key, meta)
                tmp = ctx.__enter__()
                stack.callback(_abandon, ctx)  # an entry not committed below is removed
                writers.append((ctx, meta))
                members.append(TimingMember(point, keys, stage.name, subject_label(point),
                                            str(tmp)))
            request = group_request(first, members, str(self.env.workspace_root),
                                    str(self.cache.root), self.timing_source)
            if self.placement_waits is not None:
                request.policy = self.placement_waits.policy(request.policy)
            began, start = time.time(), time.perf_counter()
            with self.console.timing(title or group_title(first),
                                     [m.label for m in members],
                                     request.policy.min_rounds) as on_round:
                try:
                    got: list[MemberResult] = time_group(
                        request, WorkerEvents(note=self.console.note, round=on_round),
                        starts=self.worker_starts)
                except (KeyboardInterrupt, StageFailed):
                    raise
                except Exception as exc:  # noqa: BLE001 - every member fails, the sweep goes on
                    got = [MemberResult(error=f"{type(exc).__name__}: {exc}",
                                        traceback=traceback.format_exc()) for _ in members]
            elapsed = time.perf_counter() - start
            for (_, _, stage, key), (ctx, meta), result in zip(entries, writers, got,
                                                                       strict=True):
                name = (stage.name, key)
                if result.meta is None:
                    failure = StageFailed(stage.name, RuntimeError(result.error or "failed"),
                                          result.traceback or "")
                    self._facts[name] = failure
                    results.append(failure)
                    continue
                facts = stage.read_facts(result.meta)
                facts.seconds = elapsed / len(entries)
                meta.update(facts.to_meta(), computed_by={
                    "host": socket.gethostname(), "pid": os.getpid(),
                    "span": [began, time.time()], "exclusive": True,
                    "interleaved": len(entries)})
                ctx.__exit__(None, None, None)  # publish the entry
                self.tally.computed[stage.name] += 1
                self.tally.seconds[stage.name] += facts.seconds
                self._facts[name] = facts
                results.append(facts)
                self.console.timed(stage.name, key)
            if self.placement_waits is not None:
                said = self.placement_waits.observe(
                    title or group_title(first),
                    [r.timing if isinstance(r, MeasureFacts) else None for r in results])
                if said:
                    self.console.note(said)
        return results


class _Abandon(Exception):
    """Raised into an entry writer to drop its temporary folder."""


def _abandon(ctx: contextlib.AbstractContextManager[Any]) -> None:
    """Exit a cache writer that was not committed (its folder is removed); a committed one
    has already exited, and a second exit is a no-op."""
    try:
        ctx.__exit__(_Abandon, _Abandon(), None)
    except (_Abandon, RuntimeError, StopIteration):
        pass
