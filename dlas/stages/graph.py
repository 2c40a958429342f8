"""The stage graph's shape, derived from what each stage declares (`Stage.parent`).

Nothing else writes the order down: the graph order every executor, the key chain and the
estimate use is a topological order of the parent links, and a point's chain is the path
from the root to its last stage. A new stage declared with a parent takes its place in
all of them; a stage whose parent is unknown, or a cycle, is an error at import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dlas.stages.base import Stage


class StageGraphError(ValueError):
    """The declared stages do not form a tree rooted at one stage."""


def graph_order(stages: Iterable[Stage[Any]]) -> tuple[Stage[Any], ...]:
    """The stages with every parent before its children, depth first, so one chain's
    stages stay together; siblings keep the order they were given in (compile, and its
    measure, before baseline), so the order is stable."""
    given = list(stages)
    by_name = {s.name: s for s in given}
    roots = [s for s in given if s.parent is None]
    if len(roots) != 1:
        raise StageGraphError(f"the stage graph needs exactly one root (a stage with no "
                              f"parent); found {[s.name for s in roots] or 'none'}")
    for s in given:
        if s.parent is not None and s.parent not in by_name:
            raise StageGraphError(f"stage '{s.name}' names parent '{s.parent}', which is "
                                  f"not a stage; the stages are {sorted(by_name)}")
    children: dict[str, list[Stage[Any]]] = {s.name: [] for s in given}
    for s in given:
        if s.parent is not None:
            children[s.parent].append(s)
    order: list[Stage[Any]] = []
    stack = [roots[0]]
    while stack:  # depth first: a chain's stages stay together (compile, measure, baseline)
        stage = stack.pop()
        order.append(stage)
        stack.extend(reversed(children[stage.name]))
    if len(order) != len(given):
        cut = sorted({s.name for s in given} - {s.name for s in order})
        raise StageGraphError(f"stages {cut} do not reach the root '{roots[0].name}' through "
                              "their parents: their parents form a cycle")
    return tuple(order)


def leaves(order: tuple[Stage[Any], ...]) -> tuple[Stage[Any], ...]:
    """The stages no other stage builds on: those whose output is a point's result."""
    parents = {s.parent for s in order}
    return tuple(s for s in order if s.name not in parents)


def chain_to(leaf: Stage[Any], order: tuple[Stage[Any], ...]) -> tuple[Stage[Any], ...]:
    """The stages a point ending at `leaf` runs, root first."""
    by_name = {s.name: s for s in order}
    path = [leaf]
    while path[-1].parent is not None:
        path.append(by_name[path[-1].parent])
    return tuple(reversed(path))
