"""What `dlas plan` says about a sweep: each point's cached stages, and, for a grid too
large to read row by row, a summary.

The grid is a product of six layers, so it grows fast: a config of 20 models, 10
compressions, 6 algorithms, 4 tunings and 10 targets is 48,000 points. Listed row by row
that took 45-86 s on 2 cores (most of it laying out the table) and said nothing a reader could
take in. Above `SUMMARY_ABOVE` points `dlas plan` prints instead what decides whether
to run the sweep: how many points, which cannot run and why (grouped by reason), how
many options each layer has, and how much of it is cached; `--all` lists every row and
`--json` prints every point as JSON.

The cache status of tens of thousands of points stays cheap because stage keys shared
by many points are computed once (`KeyMemo`), a stage folder is listed once instead of
asking the file system about each key (`CacheIndex`), and keys are computed only up to
the last stage that has any entry at all (in a fresh workspace: none).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from dlas import registry
from dlas.runner.cache import Cache, CacheIndex
from dlas.runner.fit import Column, Footnotes, fitted_table, left_out_line
from dlas.runner.labels import legend_lines, short_labels, wrap
from dlas.stages.base import StoredStage
from dlas.stages.chains import point_stages
from dlas.stages.keys import KeyMemo, iter_stage_keys
from dlas.sweep.config import SweepConfig
from dlas.sweep.grid import Point

#: Grids with more points than this are summarised unless every row is asked for.
SUMMARY_ABOVE = 200
#: Reasons for points that cannot run listed in a summary (the most common first).
REASONS_SHOWN = 10

CacheState = Literal["all", "partly", "nothing", "not runnable"]


@dataclass(frozen=True)
class PlannedPoint:
    """One point as the plan sees it: the stages it stores and those already cached."""

    point: Point
    #: Stages whose outputs the cache stores, in graph order (none when not runnable).
    stored: tuple[str, ...]
    cached: tuple[str, ...]
    #: Entries stored but damaged (files not what was written): computed again next run.
    damaged: tuple[str, ...] = ()

    @property
    def state(self) -> CacheState:
        if self.point.blocked:
            return "not runnable"
        if not self.cached:
            return "nothing"
        return "all" if len(self.cached) == len(self.stored) else "partly"

    def status(self) -> str:
        """The table's last column (rich markup)."""
        state = self.state
        if state == "not runnable":
            return f"[yellow]not runnable[/]: {escape(self.point.blocked or '')}"
        if state == "all":
            return "all stages cached"
        text = f"cached: {', '.join(self.cached)}" if self.cached else "nothing cached"
        if self.damaged:
            text += (f"; [red]damaged[/]: {', '.join(self.damaged)} (the next run computes "
                     "it again)")
        return text


def plan_points(points: Sequence[Point], cache: Cache, *, verify: bool = False
                ) -> list[PlannedPoint]:
    """Every point with what of it is cached. `verify`: also check each cached entry
    against its manifest (`Cache.check`: reads every file, so for small grids)."""
    index, memo = CacheIndex(cache), KeyMemo()
    plans = []
    for point in points:
        if point.blocked:
            plans.append(PlannedPoint(point, (), ()))
            continue
        stages = point_stages(point)
        stored = tuple(s.name for s in stages if isinstance(s, StoredStage))
        # a stage with no entry at all is cached for no point: keys past the last stage
        # that has entries would be computed for nothing
        last = max((i for i, s in enumerate(stages) if s.name in stored and index.any(s.name)),
                   default=-1)
        cached, damaged = [], []
        if last >= 0:
            for i, (stage, key) in enumerate(iter_stage_keys(point, memo, stages)):
                if stage not in stored:
                    pass
                elif verify and index.listed(stage, key):
                    check = cache.check(stage, key)
                    if check.usable:
                        cached.append(stage)
                    elif check.damaged:
                        damaged.append(stage)
                elif index.has(stage, key):
                    cached.append(stage)
                if i == last:
                    break
        plans.append(PlannedPoint(point, stored, tuple(cached), tuple(damaged)))
    return plans


@dataclass(frozen=True)
class LayerOptions:
    """A layer's choices in the config: how many, and how many of each option."""

    layer: str
    count: int
    names: tuple[tuple[str, int], ...]

    def text(self) -> str:
        return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in self.names)


@dataclass(frozen=True)
class PlanSummary:
    """What `dlas plan` prints for a grid too large to list."""

    sweep: str
    points: int
    #: Points the config's exclude rules leave out (not among `points`).
    excluded: int
    runnable: int
    #: Why points cannot run, with how many points each reason holds, most first.
    blocked: tuple[tuple[str, int], ...]
    layers: tuple[LayerOptions, ...]
    #: Runnable points by how much of them is cached.
    cached: tuple[tuple[CacheState, int], ...]

    @property
    def not_runnable(self) -> int:
        return self.points - self.runnable


def summarize(config: SweepConfig, plans: Sequence[PlannedPoint], excluded: int) -> PlanSummary:
    """The summary of a planned grid; reads nothing per point but its status."""
    reasons = Counter(p.point.blocked for p in plans if p.point.blocked)
    states = Counter(p.state for p in plans)
    layers = tuple(
        LayerOptions(layer, len(config.options(layer)),
                     tuple(sorted(Counter(s.name for s in config.options(layer)).items())))
        for layer in registry.LAYERS)
    return PlanSummary(
        sweep=config.name, points=len(plans), excluded=excluded,
        runnable=len(plans) - sum(reasons.values()),
        blocked=tuple(sorted(reasons.items(), key=lambda r: (-r[1], r[0]))),
        layers=layers, cached=tuple((s, states[s]) for s in ("all", "partly", "nothing")))


def _left_out(excluded: int) -> str:
    return f" ({excluded} more left out by its exclude rules)" if excluded else ""


def totals_line(points: int, runnable: int, cache_dir: Path) -> str:
    """The last line of every plan, table or summary."""
    return (f"{points} points: {runnable} runnable, {points - runnable} not runnable; "
            f"cache {cache_dir}")


def plan_table(title: str, plans: Sequence[PlannedPoint], width: int) -> list[Any]:
    """What `dlas plan` prints for `plans` (`PlannedPoint`s): lines and a table, a line a
    point in `width`. A layer with one choice for every point is said once above the
    table, labels are shortened (legend below), and a status too long for its cell (why
    a point cannot run) is given in full below."""
    labels = [p.point.labels() for p in plans]
    layers = list(registry.LAYERS)
    same = {layer: labels[0][layer] for layer in layers
            if len(plans) > 1 and len({row[layer] for row in labels}) == 1}
    varied = [layer for layer in layers if layer not in same]
    short = {layer: short_labels(row[layer] for row in labels) for layer in varied}
    columns = [Column("#", "#", justify="right"),
               *(Column(layer, layer, min_width=6) for layer in varied),
               Column("status", "cached stages / status", min_width=18, flexible=True)]
    rows = [[str(i), *(short[layer][row[layer]] for layer in varied),
             Text.from_markup(plan.status())]
            for i, (plan, row) in enumerate(zip(plans, labels, strict=True), 1)]
    footnotes = Footnotes()
    fitted = fitted_table(columns, rows, width, footnotes=footnotes)
    out: list = [title]
    if same:
        out += wrap("every point: " + "; ".join(f"{layer} {label}"
                                                for layer, label in same.items()),
                    width, rest="  ")
    out.append(fitted.table)
    shown = {full: s for layer in varied if layer in fitted.widths
             for full, s in short[layer].items()}
    out += [*legend_lines(shown, width), *footnotes.lines(width, "status in full:"),
            *left_out_line(fitted)]
    return out


def print_table(config: SweepConfig, plans: Sequence[PlannedPoint], excluded: int,
                cache_dir: Path, console: Console) -> None:
    """Every point, one line each, at the console's width (the plan of a small grid, or
    `--all`)."""
    title = f"sweep '{config.name}': {len(plans)} points{_left_out(excluded)}"
    for part in plan_table(title, plans, console.width):
        console.print(part, markup=False, highlight=False)
    runnable = sum(1 for p in plans if not p.point.blocked)
    console.print(totals_line(len(plans), runnable, cache_dir), markup=False)


def print_summary(summary: PlanSummary, cache_dir: Path, config_path: str,
                  console: Console) -> None:
    """The plan of a grid too large to list: counts, reasons, options, cache status."""
    def say(text: str) -> None:
        console.print(text, markup=False)

    say(f"sweep '{summary.sweep}': {summary.points} points{_left_out(summary.excluded)}")
    say("options per layer (the grid is their product):")
    width = max(len(layer) for layer in registry.LAYERS)
    for opts in summary.layers:
        say(f"  {opts.layer:<{width}} {opts.count:>4}  {opts.text()}")
    if summary.blocked:
        say(f"not runnable: {summary.not_runnable} points, by reason:")
        for reason, n in summary.blocked[:REASONS_SHOWN]:
            say(f"  {n:>7}  {reason}")
        if len(summary.blocked) > REASONS_SHOWN:
            rest = summary.blocked[REASONS_SHOWN:]
            say(f"  {sum(n for _, n in rest):>7}  ({len(rest)} more reasons)")
    counts = dict(summary.cached)
    say(f"cache, of the {summary.runnable} runnable points: {counts['all']} with every stage "
        f"cached, {counts['partly']} partly cached, {counts['nothing']} with nothing cached")
    say(totals_line(summary.points, summary.runnable, cache_dir))
    say(f"more than {SUMMARY_ABOVE} points, so not listed one by one: `dlas plan "
        f"{config_path} --all` lists every point, `--json` prints them as JSON")


def as_json(config: SweepConfig, plans: Sequence[PlannedPoint], excluded: int,
            cache_dir: Path) -> dict[str, Any]:
    """The plan as JSON: every point with its choices, status and cached stages."""
    return {
        "sweep": config.name, "cache": str(cache_dir), "left_out_by_exclude": excluded,
        "points": [{
            "index": i, "point_key": p.point.key, "choices": p.point.labels(),
            "runnable": not p.point.blocked, "not_runnable_reason": p.point.blocked,
            "cache": p.state, "stages": list(p.stored), "cached": list(p.cached),
        } for i, p in enumerate(plans, 1)],
    }
