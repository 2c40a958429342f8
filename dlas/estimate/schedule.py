"""Wall time of a stage graph on N workers: list scheduling, critical path first.

A sweep's stages form a DAG (data -> train -> compress -> import -> compile -> measure,
baseline after import), deduplicated across points, so one trained model feeds every
compression. Each worker is one machine of this machine's class that runs one stage at
a time: training, compiling and tuning already use every core of a 2-core node, and a
measurement must hold its whole node or its timings are noise, so running two stages
side by side on one node would not make either faster.

The simulation is greedy list scheduling (HLFET): whenever a worker is free it takes the
ready stage with the longest remaining path to the end of the graph. Its makespan is
never above the serial sum (1 worker reproduces it exactly) nor below the critical path,
the bounds any schedule has; it is what a work-conserving cluster executor (Ray) would
achieve without knowing the future.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CostedStage:
    """One stage to compute: its cost and the tasks it must wait for (indices)."""

    name: str
    seconds: float
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScheduleResult:
    workers: int
    #: Wall time until the last task ends.
    makespan_s: float
    #: Sum of all task costs (the wall time on one worker).
    serial_s: float
    #: The longest dependency chain: no number of workers finishes sooner.
    critical_path_s: float
    #: CostedStage indices along the critical path, first to last.
    critical_path: tuple[int, ...]


def _children(tasks: Sequence[CostedStage]) -> list[list[int]]:
    children: list[list[int]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        for dep in task.deps:
            if not 0 <= dep < len(tasks) or dep == i:
                raise ValueError(f"task {i} ({task.name}) depends on unknown task {dep}")
            children[dep].append(i)
    return children


def _topological(tasks: Sequence[CostedStage], children: list[list[int]]) -> list[int]:
    indegree = [len(t.deps) for t in tasks]
    order = [i for i, d in enumerate(indegree) if d == 0]
    for i in order:  # grows while iterated
        for child in children[i]:
            indegree[child] -= 1
            if indegree[child] == 0:
                order.append(child)
    if len(order) != len(tasks):
        raise ValueError("the stage graph has a cycle")
    return order


def bottom_levels(tasks: Sequence[CostedStage]) -> tuple[list[float], list[int]]:
    """Per task, the longest path from its start to the end of the graph (itself
    included), and the child that path continues to (-1 at its end)."""
    children = _children(tasks)
    level = [0.0] * len(tasks)
    nxt = [-1] * len(tasks)
    for i in reversed(_topological(tasks, children)):
        best, via = 0.0, -1
        for child in children[i]:
            if level[child] > best:
                best, via = level[child], child
        level[i], nxt[i] = tasks[i].seconds + best, via
    return level, nxt


def simulate(tasks: Sequence[CostedStage], workers: int) -> ScheduleResult:
    """Makespan of `tasks` on `workers` identical workers (list scheduling, longest
    remaining path first); also the serial sum and the critical path."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    children = _children(tasks)
    level, nxt = bottom_levels(tasks)
    serial = sum(t.seconds for t in tasks)
    roots = [i for i, t in enumerate(tasks) if not t.deps]
    start = max(roots, key=lambda i: level[i], default=-1)
    path: list[int] = []
    while start != -1:
        path.append(start)
        start = nxt[start]
    critical = level[path[0]] if path else 0.0

    waiting = [len(t.deps) for t in tasks]
    ready = [(-level[i], i) for i in roots]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    now = makespan = 0.0
    free = workers
    while ready or running:
        while free and ready:
            _, i = heapq.heappop(ready)
            heapq.heappush(running, (now + tasks[i].seconds, i))
            free -= 1
        now, i = heapq.heappop(running)
        finished = [i]
        while running and running[0][0] <= now:  # every task ending at the same instant
            finished.append(heapq.heappop(running)[1])
        free += len(finished)
        makespan = max(makespan, now)
        for done in finished:
            for child in children[done]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, (-level[child], child))
    return ScheduleResult(workers=workers, makespan_s=makespan, serial_s=serial,
                          critical_path_s=critical, critical_path=tuple(path))
