"""The logic of the paper's tables: accuracy per compression (Tables 2, 5) and the fastest
algorithm / compression / combination per platform, tuning and model (Tables 3, 4, 6).

Layouts. An algorithm may run in several activation layouts (NCHW, the paper's; NHWC;
NCHW8c): layer 4's choice is the algorithm *and* its layout. A speed cell (compression,
algorithm) holds the algorithm's fastest layout, so every rule that compares algorithms
compares each at its best, never two layouts of one algorithm as two algorithms; the
NCHW point of the same cell is kept beside it (`SpeedRow.nchw`), so a reader sees what
the layout bought over the paper's setting. `layout_tables` lists every layout measured.

Everything here works on verified results only and is pure (no rendering), so the
selection rules can be tested on hand-built points.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from dlas.report.comparisons import faster, ranked, speedup_interval
from dlas.report.data import NCHW, ReportPoint, algorithm_family, layout_order
from dlas.report.paper import Paper, PaperSpeedRow

#: The paper's column order; options it does not know come after, alphabetically.
COMPRESSION_ORDER = ["none", "weight_pruning", "channel_pruning", "channel_pruning_physical",
                     "block_pruning", "nm_pruning", "int8", "int8_uncalibrated", "float16"]
FAMILY_ORDER = ["gemm", "direct", "spatial_pack"]
#: The pruning options dlas ships. A row's compression counts as pruning when it is one of
#: these (also where the report runs without the option registered) or a registered option
#: tagged `pruning` (`is_pruning`), so a third-party pruning plugin joins observations II,
#: IV, IX, X and XII without an edit here.
PRUNING = frozenset({"weight_pruning", "channel_pruning", "channel_pruning_physical",
                     "block_pruning", "nm_pruning"})
QUANTIZATION = frozenset({"float16", "int8", "int8_uncalibrated"})

SHORT = {"none": "Dense", "weight_pruning": "WP", "channel_pruning": "CP",
         "channel_pruning_physical": "CP-phys", "block_pruning": "BP", "nm_pruning": "N:M",
         "int8": "i8", "int8_uncalibrated": "i8-uncal", "float16": "f16"}


def is_pruning(compression: str) -> bool:
    """Whether a compression option prunes: a shipped pruning option, or one registered
    with the `pruning` tag."""
    if compression in PRUNING:
        return True
    from dlas import registry

    try:
        return registry.PRUNING_TAG in registry.get("compression", compression).tags
    except KeyError:
        return False


def pruning_in(compressions: Iterable[str]) -> list[str]:
    """The pruning options among `compressions`, in the report's column order."""
    return ordered({c for c in compressions if is_pruning(c)}, COMPRESSION_ORDER)


def ordered(names: Iterable[str], order: list[str]) -> list[str]:
    names = set(names)
    return [n for n in order if n in names] + sorted(names - set(order))


def short(compression: str) -> str:
    return SHORT.get(compression, compression)


# -- grouping -------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Group:
    """One block of a speed table: a platform at one tuning level, for one dataset."""

    dataset: str
    device: str
    platform: str
    target: str
    tuning: str

    @property
    def tuned(self) -> bool:
        return self.tuning != "none"

    @property
    def label(self) -> str:
        tuning = "untuned" if not self.tuned else f"tuned, {self.tuning}"
        return f"{self.platform} ({tuning})"


def group_order(g: Group) -> tuple:
    """Tables list a platform untuned before tuned."""
    return (g.dataset, g.device, g.platform, g.tuned, g.tuning)


def group_of(p: ReportPoint) -> Group:
    return Group(p.dataset, p.device, p.platform, p.target, p.tuning)


Cells = dict[tuple[str, str], ReportPoint]  # (compression name, algorithm) -> its point
#: (compression name, algorithm) -> layout -> its point: every layout measured.
LayoutCells = dict[tuple[str, str], dict[str, ReportPoint]]


def _preferred(a: ReportPoint, b: ReportPoint) -> ReportPoint:
    """Of two points with the same compression, algorithm and layout (different
    parameters), the one the paper would tabulate: the higher compression ratio, then the
    one written last (the same compression re-run under other parameters), then the
    faster."""
    ka = (-(a.ratio or 0.0), -a.updated_at, a.latency_ms or float("inf"), a.key)
    kb = (-(b.ratio or 0.0), -b.updated_at, b.latency_ms or float("inf"), b.key)
    return a if ka <= kb else b


def layout_cells(points: Iterable[ReportPoint]) -> dict[Group, dict[str, LayoutCells]]:
    """Verified timings by group, model label, (compression, algorithm) and layout. A
    compression run with several parameter sets keeps one per layout (`_preferred`)."""
    out: dict[Group, dict[str, LayoutCells]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(dict)))
    for p in points:
        if not p.is_result:
            continue
        layouts = out[group_of(p)][p.model_label][(p.compression, p.algorithm)]
        layouts[p.layout] = _preferred(layouts[p.layout], p) if p.layout in layouts else p
    return {g: {m: {k: dict(v) for k, v in cells.items()} for m, cells in out[g].items()}
            for g in sorted(out, key=group_order)}


def fastest_layout(layouts: dict[str, ReportPoint]) -> ReportPoint:
    """An algorithm's fastest layout, ranked in one vCPU placement (`ranked`); of equal
    medians, NCHW (the paper's), then by name."""
    candidates = ranked(layouts.values()) or [(p, p.latency_ms or 0.0)
                                              for p in layouts.values()]
    return min(candidates, key=lambda pv: (pv[1], pv[0].layout != NCHW, pv[0].layout))[0]


def best_layouts(cells: LayoutCells) -> Cells:
    """Each (compression, algorithm) at its fastest layout."""
    return {key: fastest_layout(layouts) for key, layouts in cells.items()}


def nchw_cells(cells: LayoutCells) -> Cells:
    """Each (compression, algorithm) in NCHW, where it was measured in NCHW."""
    return {key: layouts[NCHW] for key, layouts in cells.items() if NCHW in layouts}


def speed_cells(points: Iterable[ReportPoint]) -> dict[Group, dict[str, Cells]]:
    """Verified timings by group and model label, each (compression, algorithm) at its
    fastest layout (`best_layouts`): what every fastest-choice rule compares. A
    compression run with several parameter sets keeps one (see `_preferred`)."""
    return {g: {m: best_layouts(cells) for m, cells in models.items()}
            for g, models in layout_cells(points).items()}


def _fastest(candidates: Iterable[ReportPoint]) -> ReportPoint | None:
    """The fastest of `candidates`, ranked in one vCPU placement (`ranked`)."""
    found = min(ranked(candidates), key=lambda pv: (pv[1], pv[0].compression,
                                                    pv[0].algorithm), default=None)
    return found[0] if found else None


def fastest_algorithm(cells: Cells, compression: str) -> ReportPoint | None:
    """The fastest algorithm (any data format) for one compression."""
    return _fastest(p for (c, _), p in cells.items() if c == compression)


def fastest_compression(cells: Cells, family: str) -> ReportPoint | None:
    """The fastest compression for one algorithm family (dense or CSR variant)."""
    return _fastest(p for p in cells.values() if p.family == family)


def overall_fastest(cells: Cells) -> ReportPoint | None:
    return _fastest(cells.values())


# -- speed tables (3, 4, 6) -------------------------------------------------------------


@dataclass
class SpeedRow:
    group: Group
    model_label: str
    model: str
    #: Each (compression, algorithm) at its fastest layout.
    cells: Cells
    fastest_algorithm: dict[str, ReportPoint | None]
    fastest_compression: dict[str, ReportPoint | None]
    overall: ReportPoint | None
    paper: PaperSpeedRow | None = None
    #: The same cells in NCHW, the paper's layout, where measured: what is shown beside a
    #: cell whose fastest layout is another.
    nchw: Cells = field(default_factory=dict)

    def nchw_of(self, p: ReportPoint) -> ReportPoint | None:
        """The NCHW point of `p`'s cell; None when `p` is NCHW or its cell has none."""
        if p.layout == NCHW:
            return None
        return self.nchw.get((p.compression, p.algorithm))


@dataclass
class SpeedTable:
    dataset: str
    device: str
    compressions: list[str]
    families: list[str]
    rows: list[SpeedRow] = field(default_factory=list)


def speed_tables(points: Iterable[ReportPoint], paper: Paper | None = None,
                 paper_platforms: dict[str, str] | None = None) -> list[SpeedTable]:
    """One table per (dataset, device); rows per platform x tuning x model. With
    `paper_platforms` (target option -> paper platform) rows carry the paper's row."""
    by_group = layout_cells(points)
    tables: dict[tuple[str, str], SpeedTable] = {}
    for group, per_model in by_group.items():
        key = (group.dataset, group.device)
        models = {m: best_layouts(cells) for m, cells in per_model.items()}
        all_cells = [p for cells in models.values() for p in cells.values()]
        table = tables.get(key)
        if table is None:
            table = tables[key] = SpeedTable(group.dataset, group.device, [], [])
        table.compressions = ordered({*table.compressions, *(p.compression for p in all_cells)},
                                     COMPRESSION_ORDER)
        table.families = ordered({*table.families, *(p.family for p in all_cells)},
                                 FAMILY_ORDER)
        for model_label, cells in models.items():
            model = next(iter(cells.values())).model
            paper_row = None
            if paper is not None and paper_platforms and group.target in paper_platforms:
                paper_row = paper.speed_row(group.dataset, paper_platforms[group.target],
                                            group.tuned, model)
            table.rows.append(SpeedRow(
                group, model_label, model, cells,
                {c: fastest_algorithm(cells, c) for c in table.compressions},
                {f: fastest_compression(cells, f) for f in table.families},
                overall_fastest(cells), paper_row, nchw_cells(per_model[model_label]),
            ))
    for table in tables.values():  # compressions seen later in the table apply to all rows
        for row in table.rows:
            for c in table.compressions:
                row.fastest_algorithm.setdefault(c, fastest_algorithm(row.cells, c))
            for f in table.families:
                row.fastest_compression.setdefault(f, fastest_compression(row.cells, f))
    return [tables[k] for k in sorted(tables)]


@dataclass(frozen=True)
class PaperCell:
    """Our cell beside the paper's. `same` is None when there is nothing to compare (the
    paper has no cell, or we have no measurement)."""

    ours: str
    paper: str | None = None
    same: bool | None = None

    @property
    def differs(self) -> bool:
        return self.same is False


def _compare(ours: ReportPoint | None, text: str, ours_in_paper_terms: str | None,
             paper_cell: str | None) -> PaperCell:
    if ours is None:
        return PaperCell("-", paper_cell)
    if paper_cell is None:
        return PaperCell(text)
    return PaperCell(text, paper_cell, ours_in_paper_terms == paper_cell)


def _with_layout(text: str, p: ReportPoint) -> str:
    return text if p.layout == NCHW else f"{text} {p.layout}"


def compare_algorithm(ours: ReportPoint | None, paper_cell: str | None,
                      paper: Paper | None) -> PaperCell:
    """Ours is the algorithm name (with its layout when not NCHW); it agrees when its
    family is the paper's algorithm: the paper names no layout (it ran NCHW only)."""
    name = paper.algorithm_name(ours.family) if paper and ours else None
    return _compare(ours, ours.algorithm_label if ours else "-", name, paper_cell)


def compare_compression(ours: ReportPoint | None, paper_cell: str | None,
                        paper: Paper | None) -> PaperCell:
    abbrev = paper.compression_abbrev(ours.compression, aliases=True) if paper and ours else None
    return _compare(ours, _with_layout(short(ours.compression), ours) if ours else "-", abbrev,
                    paper_cell)


def compare_overall(ours: ReportPoint | None, paper_cell: str | None,
                    paper: Paper | None) -> PaperCell:
    if ours is None:
        return PaperCell("-", paper_cell)
    text = f"{short(ours.compression)}+{ours.algorithm_label}"
    in_paper_terms = None
    if paper is not None:
        abbrev = paper.compression_abbrev(ours.compression, aliases=True)
        name = paper.algorithm_name(ours.family)
        if abbrev and name:
            in_paper_terms = f"{abbrev}+{name}"
    return _compare(ours, text, in_paper_terms, paper_cell)


# -- data layouts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutRow:
    """One algorithm of one model, compression, platform and tuning, in every layout it
    was measured in."""

    group: Group
    model_label: str
    compression: str
    algorithm: str
    #: layout -> its point.
    layouts: dict[str, ReportPoint]

    @property
    def fastest(self) -> ReportPoint:
        return fastest_layout(self.layouts)

    @property
    def nchw(self) -> ReportPoint | None:
        return self.layouts.get(NCHW)

    @property
    def speedup_over_nchw(self) -> float | None:
        """NCHW time / the fastest layout's in one vCPU placement (1.0 when NCHW is the
        fastest); None without an NCHW point, or without a placement in common."""
        nchw, best = self.nchw, self.fastest
        if nchw is None or not nchw.latency_ms or not best.latency_ms:
            return None
        if best is nchw:
            return 1.0
        stat = speedup_interval(nchw, best)
        return stat.value if stat.comparable else None

    def decided(self) -> bool | None:
        """Whether the fastest layout is decidedly faster than NCHW (the report's one
        comparison, `comparisons.faster`); None for a tie within noise, or without an
        NCHW point to compare with. NCHW itself fastest: False."""
        nchw, best = self.nchw, self.fastest
        if nchw is None:
            return None
        if best is nchw:
            return False
        return faster(best, nchw)


@dataclass
class LayoutTable:
    """Per (dataset, device): the layouts measured (the columns) and a row per algorithm
    measured in a layout other than NCHW."""

    dataset: str
    device: str
    layouts: list[str]
    rows: list[LayoutRow] = field(default_factory=list)


def layout_tables(points: Iterable[ReportPoint]) -> list[LayoutTable]:
    """The time of each algorithm in each layout, its fastest layout and that layout's
    speedup over NCHW. Only algorithms run in a layout other than NCHW have a row (an
    algorithm in NCHW alone says nothing about layouts): a sweep without layout variants
    has no table."""
    order = {c: i for i, c in enumerate(COMPRESSION_ORDER)}
    tables: dict[tuple[str, str], LayoutTable] = {}
    for group, models in layout_cells(points).items():
        for model_label, cells in models.items():
            keys = sorted(cells, key=lambda k: (order.get(k[0], len(order)), k[0],
                                                _family_rank(k[1]), k[1]))
            for compression, algorithm in keys:
                layouts = cells[(compression, algorithm)]
                if set(layouts) == {NCHW}:
                    continue
                table = tables.setdefault((group.dataset, group.device),
                                          LayoutTable(group.dataset, group.device, []))
                table.layouts = layout_order({*table.layouts, *layouts})
                table.rows.append(LayoutRow(group, model_label, compression, algorithm,
                                            {lay: layouts[lay] for lay in layout_order(layouts)}))
    return [tables[k] for k in sorted(tables)]


def _family_rank(algorithm: str) -> tuple[int, str]:
    """The paper's algorithm order (gemm, direct, spatial pack), then others by name."""
    family = algorithm_family(algorithm)
    return (FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER),
            family)


# -- accuracy tables (2, 5) -------------------------------------------------------------


@dataclass
class AccuracyCell:
    compression: str
    label: str
    accuracy: float | None
    ratio: float | None
    accuracy_source: str | None = None
    ort_accuracy: float | None = None


@dataclass
class AccuracyRow:
    dataset: str
    model_label: str
    model: str
    params: int | None
    macs: int | None
    top1: float | None
    cells: dict[str, AccuracyCell]


@dataclass
class AccuracyTable:
    dataset: str
    compressions: list[str]
    rows: list[AccuracyRow]


def removed_fraction(ratio: float | None) -> float | None:
    """The paper prints compression as the share removed: ideal speedup 20x -> 95%."""
    return None if ratio is None or ratio <= 0 else 1.0 - 1.0 / ratio


def accuracy_tables(points: Iterable[ReportPoint]) -> list[AccuracyTable]:
    """Per dataset and model: params, MACs, dense top-1 and each compression's chosen
    ratio and top-1, from verified points (accuracy is the same for every algorithm)."""
    chosen: dict[tuple[str, str], dict[str, ReportPoint]] = defaultdict(dict)
    for p in points:
        if not p.is_result:
            continue
        per_model = chosen[(p.dataset, p.model_label)]
        prev = per_model.get(p.compression)
        per_model[p.compression] = _preferred(prev, p) if prev else p
    tables: dict[str, AccuracyTable] = {}
    for (dataset, model_label), per_comp in sorted(chosen.items()):
        dense = per_comp.get("none")
        any_point = dense or next(iter(per_comp.values()))
        top1 = dense.accuracy if dense else any_point.dense_accuracy
        cells = {
            c: AccuracyCell(c, p.compression_label, p.accuracy, p.ratio, p.accuracy_source,
                            p.ort_accuracy)
            for c, p in per_comp.items() if c != "none"
        }
        table = tables.setdefault(dataset, AccuracyTable(dataset, [], []))
        table.compressions = ordered({*table.compressions, *cells}, COMPRESSION_ORDER)
        table.rows.append(AccuracyRow(dataset, model_label, any_point.model,
                                      any_point.params, any_point.macs, top1, cells))
    return [tables[k] for k in sorted(tables)]


# -- TVM against the baselines -------------------------------------------------------------

#: Baseline runtimes in column order; others follow alphabetically.
RUNTIME_ORDER = ["onnxruntime", "pytorch"]


def _setting(p: ReportPoint) -> tuple[str, str, str, str]:
    """What a TVM variant and a baseline must share to be compared: the same model,
    compressed the same way, on the same platform (the baseline has no algorithm)."""
    return (p.dataset, p.platform, p.model_label, p.compression_label)


@dataclass
class BaselineRow:
    """One verified TVM variant beside the baselines of its model/compression/platform."""

    variant: ReportPoint
    baselines: dict[str, ReportPoint]

    def ratio(self, runtime: str) -> float | None:
        """TVM time / baseline time in one vCPU placement: above 1 the TVM variant is
        slower; None without the baseline, or without a placement in common."""
        base = self.baselines.get(runtime)
        if base is None or not base.latency_ms or self.variant.latency_ms is None:
            return None
        stat = speedup_interval(self.variant, base)
        return stat.value if stat.comparable else None


@dataclass
class BaselineComparison:
    runtimes: list[str]
    #: Every verified baseline point (latest per setting and runtime).
    baselines: list[ReportPoint]
    rows: list[BaselineRow]


def baseline_comparison(points: Iterable[ReportPoint]) -> BaselineComparison:
    """Every verified TVM variant that has a verified baseline of the same setting, with
    its time relative to each runtime."""
    points = list(points)
    by_setting: dict[tuple[str, str, str, str], dict[str, ReportPoint]] = defaultdict(dict)
    for p in points:
        if p.is_baseline_result:
            runtimes = by_setting[_setting(p)]
            prev = runtimes.get(p.tuning)
            if prev is None or p.updated_at >= prev.updated_at:
                runtimes[p.tuning] = p
    runtimes = ordered({r for per in by_setting.values() for r in per}, RUNTIME_ORDER)
    order = {c: i for i, c in enumerate(COMPRESSION_ORDER)}

    def sort_key(p: ReportPoint) -> tuple:
        return (p.dataset, p.platform, p.model_label, order.get(p.compression, len(order)),
                p.compression_label, p.tuned, p.tuning, p.latency_ms or 0.0, p.algorithm,
                p.layout)

    rows = [BaselineRow(p, by_setting[_setting(p)])
            for p in sorted((p for p in points if p.is_result and _setting(p) in by_setting),
                            key=sort_key)]
    baselines = sorted((b for per in by_setting.values() for b in per.values()),
                       key=lambda b: (sort_key(b)[:5], b.tuning))
    return BaselineComparison(runtimes, baselines, rows)
