"""Assemble the report from the results database: tables, figures, the expected-speedup
analysis, the observations, environment and verification, as Markdown and HTML."""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlas.models.options import CIFAR_INPUT
from dlas.report.data import NCHW, RUNTIME_NAMES, ReportPoint, latest_per_label, load_points
from dlas.report.deciding_layers import observation_layers
from dlas.report.experiments import Experiment
from dlas.report.figures import accuracy_figure, inference_figure
from dlas.report.observations import observations
from dlas.report.paper import Paper, load_paper
from dlas.report.profile_data import ProfiledPoint, load_profiles
from dlas.report.profiles import profile_section
from dlas.report.render import (
    Bullets,
    Cell,
    Document,
    Heading,
    Image,
    Para,
    Table,
    to_html,
    to_markdown,
)
from dlas.report.reproducibility import reproducibility_section
from dlas.report.same_work import same_work_section
from dlas.report.speedup import averages, speedup_cells
from dlas.report.tables import (
    LayoutRow,
    SpeedRow,
    accuracy_tables,
    baseline_comparison,
    compare_algorithm,
    compare_compression,
    compare_overall,
    layout_tables,
    removed_fraction,
    short,
    speed_tables,
)

#: SIMD-relevant CPU flags shown in the environment section (the full list is in the DB).
_SIMD = ("sse4", "avx", "fma", "f16c", "vnni", "amx", "neon", "asimd", "sve", "dotprod")
#: Evidence lines shown per observation part (the rest are counted, not printed).
MAX_EVIDENCE = 12


@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    figures: list[Path] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)


def fmt_count(n: int | None) -> str:
    """11.2M, 4.1G, as the paper prints parameters and MACs."""
    if n is None:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.1f}{suffix}"
    return str(n)


def fmt_acc(acc: float | None) -> str:
    return "unavailable" if acc is None else f"{100 * acc:.1f}%"


def fmt_ratio(ratio: float | None) -> str:
    removed = removed_fraction(ratio)
    return "?" if removed is None else f"{100 * removed:.0f}%"


def fmt_ms(ms: float | None) -> str:
    return "-" if ms is None else (f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms")


def fmt_time(p: ReportPoint) -> str:
    """A point's median with the 95% confidence interval of the median: '1.23 ms
    [1.20-1.26]', so a reader sees how far apart two medians must be to differ; rows
    written before intervals existed show the interquartile range of their samples."""
    text = fmt_ms(p.latency_ms)
    lo, hi = p.latency_ci_low_ms, p.latency_ci_high_ms
    if lo is not None and hi is not None:
        digits_ci = (lambda v: f"{v:.3g}") if hi < 100 else (lambda v: f"{v:.0f}")
        where = f", {p.placement}" if p.placement not in (None, "near", "single") else ""
        return f"{text} [{digits_ci(lo)}-{digits_ci(hi)}{where}]"
    if p.latency_q1_ms is None or p.latency_q3_ms is None:
        return text
    q1, q3 = p.latency_q1_ms, p.latency_q3_ms
    digits = (lambda v: f"{v:.3g}") if q3 < 100 else (lambda v: f"{v:.0f}")
    return f"{text} (IQR {digits(q1)}-{digits(q3)})"


# -- sections ------------------------------------------------------------------------------


def _header(doc: Document, points: list[ReportPoint], db_path: Path, sweeps: list[str] | None,
            experiment: Experiment | None, profile: str | None, paper: Paper,
            notes: Iterable[str]) -> None:
    status = Counter(p.status for p in points)
    verified_ok = sum(1 for p in points if p.is_result)
    lines = [f"Built {_dt.datetime.now().isoformat(timespec='seconds')} from {db_path}"
             + (f", sweep(s) {', '.join(sweeps)}" if sweeps else ", all sweeps") + "."]
    if experiment is not None:
        prof = experiment.profiles.get(profile or "")
        about = f", profile '{profile}': {prof.description.rstrip('.')}" if prof else ""
        lines.append(f"Experiment {experiment.name}: {experiment.title}{about}.")
        if experiment.paper_platforms:
            mapping = ", ".join(f"{t} -> {p}" for t, p in experiment.paper_platforms.items())
            lines.append(f"The paper's cells are printed beside ours for these targets: "
                         f"{mapping}. Cells marked ≠ differ from the paper.")
    for dataset in sorted({p.dataset for p in points}):
        if dataset in paper.stand_ins:
            lines.append(f"STAND-IN DATASET: {' '.join(paper.stand_ins[dataset].split())}")
            cifar = CIFAR_INPUT[1]  # the side a stand-in's rows match unless resized
            sides = sorted({p.image_size for p in points if p.dataset == dataset
                            and p.image_size is not None and p.image_size != cifar})
            if sides:
                sizes = ", ".join(f"{s}x{s}" for s in sides)
                lines.append(
                    f"Here {dataset} was upsampled to {sizes} instead of {cifar}x{cifar} "
                    f"(its image_size): a model's work per inference is smaller "
                    "than on CIFAR-10, so times compare within this sweep, not with the "
                    "paper's.")
    lines.append(
        f"{len(points)} points: {verified_ok} verified results, {status['failed']} failed, "
        f"{status['verification_failed']} failed verification, {status['not_runnable']} not "
        "runnable. Only verified results appear in tables, figures and analyses; every point "
        "is listed under Verification.")
    baselines = sum(1 for p in points if p.is_baseline_result)
    if baselines:
        lines.append(f"{baselines} verified baseline points (PyTorch / ONNX Runtime) are "
                     "compared with the TVM variants in their own section, not counted above.")
    noisy = [p for p in points if p.noisy and p.is_timed]
    if noisy:
        busy = sum(1 for p in noisy if p.noise_reason and "busy machine" in p.noise_reason)
        lines.append(f"{len(noisy)} timed points are flagged noisy: the 95% confidence "
                     "interval of their median is wider than the sweep's ci_threshold, or "
                     "rounds taken while other processes kept the CPUs busy had to be kept "
                     f"({busy} of them) (marked 'noisy' below; a red outline in the "
                     "figures).")
    if any(p.is_timed for p in points):
        lines.append("Times are medians with the 95% confidence interval of the median in "
                     "brackets (over rounds and timing runs; docs/timing.md), taken in near "
                     "vCPU placement unless the bracket names another; figures draw the "
                     "interquartile range of each point's samples as whiskers. A comparison "
                     "is decided only when its interval excludes a tie.")
    lines += list(notes)
    doc.add(Bullets(lines))


def _accuracy_section(doc: Document, points: list[ReportPoint], paper: Paper, out: Path,
                      files: list[Path]) -> None:
    doc.add(Heading("Accuracy and compression (Tables 2 and 5, Figure 3)"))
    tables = accuracy_tables(points)
    if not tables:
        doc.add(Para("No verified results: nothing to tabulate."))
        return
    for table in tables:
        number = paper.number("accuracy_table", table.dataset)
        cols = ["model", "params", "MACs", "top-1 (dense)"] + [
            f"{short(c)}: top-1 (compression)" for c in table.compressions]
        rows = []
        for r in table.rows:
            pr = paper.accuracy_row(r.dataset, r.model)
            top1 = fmt_acc(r.top1) + (f" · paper {pr['top1']}%" if pr else "")
            row: list[Cell | str] = [
                r.model_label,
                fmt_count(r.params) + (f" · paper {pr['params']}" if pr else ""),
                fmt_count(r.macs) + (f" · paper {pr['macs']}" if pr else ""), top1]
            for c in table.compressions:
                cell = r.cells.get(c)
                if cell is None:
                    row.append("-")
                    continue
                text = f"{fmt_acc(cell.accuracy)} ({fmt_ratio(cell.ratio)})"
                if cell.accuracy_source and cell.accuracy_source != "pytorch":
                    text += f" [{cell.accuracy_source}]"
                if cell.ort_accuracy is not None:
                    text += f" (ONNX Runtime {fmt_acc(cell.ort_accuracy)})"
                if pr and isinstance(pr.get(c), dict):
                    text += f" · paper {pr[c]['accuracy']}% ({pr[c]['ratio']}%)"
                row.append(text)
            rows.append(row)
        caption = (f"{number or 'Accuracy'} ({table.dataset}): top-1 and, in brackets, the "
                   "chosen compression ratio as the share of the model removed (95% = 20x "
                   "ideal speedup; float16 50%, int8 75%).")
        doc.add(Table(cols, rows, caption))
        png = accuracy_figure(points, table.dataset,
                                      out / "figures" / f"accuracy-{table.dataset}.png")
        if png:
            files.append(png)
            fig_no = paper.number("accuracy_figure", table.dataset)
            doc.add(Image(png, f"{fig_no or 'Figure 3'} ({table.dataset}): accuracy against "
                               "pruning level (star = level used), and float16 / int8 accuracy"))


def _has_layouts(points: Iterable[ReportPoint]) -> bool:
    """Whether any result ran in a layout other than NCHW: only then do the sections say
    anything about layouts (a sweep without them reads as it always did)."""
    return any(p.layout != NCHW for p in points if p.is_result)


def _beside_nchw(row: SpeedRow, shown: ReportPoint | None, *, time_shown: bool) -> str:
    """What a speed cell adds when its fastest layout is not NCHW: its time (unless the
    cell already shows it) and the NCHW time of the same compression and algorithm, the
    paper's setting: ', 4.23 ms · NCHW 16.9 ms'."""
    if shown is None or shown.layout == NCHW:
        return ""
    nchw = row.nchw_of(shown)
    own = "" if time_shown else f", {fmt_ms(shown.latency_ms)}"
    return f"{own} · NCHW {fmt_ms(nchw.latency_ms) if nchw else 'not measured'}"


def _speed_section(doc: Document, points: list[ReportPoint], paper: Paper,
                   experiment: Experiment | None, out: Path, files: list[Path]) -> None:
    doc.add(Heading("Fastest algorithm and compression (Tables 3, 4 and 6)"))
    platforms = experiment.paper_platforms if experiment else None
    tables = speed_tables(points, paper, platforms)
    if not tables:
        doc.add(Para("No verified timings."))
    for t in tables:
        number = paper.number("speed_table", t.dataset, t.device)
        cols = ["platform (tuning)", "model"]
        cols += [f"fastest alg.: {short(c)}" for c in t.compressions]
        cols += [f"fastest compr.: {f}" for f in t.families] + ["overall fastest"]
        rows = []
        differ = compared = 0
        for r in t.rows:
            pr = r.paper
            row: list[Cell | str] = [r.group.label, r.model_label]
            comps = [compare_algorithm(r.fastest_algorithm[c],
                                       pr.fastest_algorithm.get(c) if pr else None, paper)
                     for c in t.compressions]
            comps += [compare_compression(r.fastest_compression[f],
                                          pr.fastest_compression.get(f) if pr else None, paper)
                      for f in t.families]
            overall = compare_overall(r.overall, pr.overall if pr else None, paper)
            shown = [*(r.fastest_algorithm[c] for c in t.compressions),
                     *(r.fastest_compression[f] for f in t.families), r.overall]
            for cmp, point in zip([*comps, overall], shown, strict=True):
                text = cmp.ours + (f" (paper {cmp.paper})" if cmp.paper else "")
                if cmp is overall and r.overall is not None:
                    text += f", {fmt_time(r.overall)}"
                text += _beside_nchw(r, point, time_shown=cmp is overall)
                row.append(Cell(text, cmp.differs))
                differ += cmp.differs
                compared += cmp.same is not None
            rows.append(row)
        caption = (f"{number or 'Fastest choices'} ({t.dataset}, {t.device.upper()}): per "
                   "platform, tuning and model, the fastest algorithm for each compression, "
                   "the fastest compression for each algorithm family (dense or CSR), and "
                   "the fastest combination.")
        if compared:
            caption += f" {differ} of {compared} cells differ from the paper (≠)."
        if any(p.layout != NCHW for r in t.rows for p in r.cells.values()):
            caption += (" Each algorithm is taken at its fastest data layout; a cell whose "
                        "layout is not NCHW names it, with its time and, beside it, the NCHW "
                        "time of the same compression and algorithm (the paper ran NCHW "
                        "only and is compared on the algorithm).")
        doc.add(Table(cols, rows, caption))
    doc.add(Heading("Inference time (Figures 4-7)"))
    for dataset, device in sorted({(p.dataset, p.device) for p in points if p.is_result}):
        png = inference_figure(points, dataset, device,
                                       out / "figures" / f"inference-{dataset}-{device}.png")
        if png:
            files.append(png)
            number = paper.number("inference_figure", dataset, device) or "Figure"
            doc.add(Image(png, f"{number} ({dataset}, {device.upper()}): median inference "
                               "time at batch 1 per model, compression and algorithm; "
                               "whiskers span the interquartile range of the samples; "
                               "hatched bars use the CSR sparse format; a red outline marks "
                               "a point flagged noisy"
                               + ("; each algorithm at its fastest data layout, named on "
                                  "bars not in NCHW" if _has_layouts(points) else "")
                               + f" (numbers: figures/{png.stem}.csv)"))


def _layout_cell(row: LayoutRow, layout: str) -> str:
    p = row.layouts.get(layout)
    return "-" if p is None else fmt_time(p) + _noisy(p)


def _layout_speedup(row: LayoutRow) -> str:
    """The fastest layout's speedup over NCHW, said to be a tie when its interval does
    not exclude one (`LayoutRow.decided`)."""
    speedup = row.speedup_over_nchw
    if row.nchw is None:
        return "no NCHW point"
    if speedup is None:
        return "not comparable (no vCPU placement in common)"
    if row.fastest.layout == NCHW:
        return "1.00x (NCHW fastest)"
    return f"{speedup:.2f}x" + ("" if row.decided() else " (a tie within noise)")


def _layout_section(doc: Document, points: list[ReportPoint]) -> None:
    """Layer 4's data formats: every layout an algorithm was measured in, its fastest and
    what that bought over NCHW. Only for sweeps that ran layouts other than NCHW."""
    tables = layout_tables(points)
    if not tables:
        return
    doc.add(Heading("Data layouts"))
    doc.add(Para("Per platform, tuning, model and compression, every algorithm run in a "
                 "layout other than NCHW (the paper's): its time in each layout measured, "
                 "its fastest layout, and that layout's speedup over NCHW. The tables "
                 "above and the observations take each algorithm at its fastest layout."))
    for t in tables:
        rows: list[list[Cell | str]] = [
            [r.group.label, r.model_label, short(r.compression), r.algorithm,
             *(_layout_cell(r, lay) for lay in t.layouts), r.fastest.layout,
             _layout_speedup(r)] for r in t.rows]
        doc.add(Table(["platform (tuning)", "model", "compression", "algorithm", *t.layouts,
                       "fastest layout", "speedup over NCHW"], rows,
                      f"Data layouts ({t.dataset}, {t.device.upper()}): median [95% CI] per "
                      "layout; a speedup whose interval does not exclude 1 is a tie."))


def _speedup_section(doc: Document, points: list[ReportPoint], paper: Paper,
                     experiment: Experiment | None) -> None:
    doc.add(Heading("Expected speedup"))
    doc.add(Para(
        "Per platform, tuning and model: the best time of each compression over all "
        "algorithms against the best dense time over all algorithms, as a percentage of the "
        "ideal speedup its compression ratio promises (95% pruning: 20x, float16: 2x, "
        "int8: 4x). Averages are arithmetic means of the percentages over models, as the "
        "paper reports them (Section 5.1.2)."
        + (" An algorithm's best time is over its data layouts too: the best dense time "
           "may be in any layout." if _has_layouts(points) else "")))
    cells = speedup_cells(points)
    if not cells:
        doc.add(Para("Not measured: needs dense and compressed timings of the same model."))
        return
    rows: list[list[Cell | str]] = [
        [c.group.label, c.model_label, short(c.compression),
         "?" if c.ratio is None else f"{c.ratio:.1f}x",
         f"{c.dense.algorithm_label}, {fmt_time(c.dense)}",
         f"{c.best.algorithm_label}, {fmt_time(c.best)}", c.speedup_text,
         "-" if c.pct_expected is None else f"{c.pct_expected:.1f}%"] for c in cells]
    doc.add(Table(["platform (tuning)", "model", "compression", "ideal speedup",
                   "best dense", "best compressed", "speedup", "% of expected"], rows,
                  "Per model"))
    platforms = experiment.paper_platforms if experiment else None
    avg_rows: list[list[Cell | str]] = [
        [a.group.label, short(a.compression), str(a.models),
         "-" if a.mean_pct is None else f"{a.mean_pct:.1f}%",
         "-" if a.geomean_speedup is None else f"{a.geomean_speedup:.2f}x",
         "-" if a.paper_pct is None else f"{a.paper_pct:.1f}%"]
        for a in averages(cells, paper, platforms)]
    doc.add(Table(["platform (tuning)", "compression", "models", "mean % of expected",
                   "geo-mean speedup", "paper: mean % of expected"], avg_rows,
                  "Averaged over models"))


def fmt_ratio_vs(ratio: float | None) -> str:
    """TVM time / baseline time as the reader wants it: '1.8x slower', '2.0x faster'."""
    if ratio is None:
        return "-"
    if ratio >= 1:
        return f"{ratio:.2f}x slower"
    return f"{1 / ratio:.2f}x faster"


def _noisy(p: ReportPoint) -> str:
    if not p.noisy:
        return ""
    reason = p.noise_reason or ""
    if "busy machine" in reason or "kept the CPUs busy" in reason:
        return " (noisy: busy machine)"
    if "95% CI" in reason:
        return " (noisy: wide interval)"
    return f" (noisy, cv {p.latency_cv:.0%})" if p.latency_cv is not None else " (noisy)"


def _baseline_section(doc: Document, points: list[ReportPoint]) -> None:
    doc.add(Heading("TVM against ONNX Runtime and PyTorch"))
    cmp = baseline_comparison(points)
    if not cmp.baselines:
        doc.add(Para("No baselines measured: add `pytorch` and/or `onnxruntime` to the "
                     "sweep's `tuning` to time the same models in what a user would "
                     "otherwise deploy."))
        return
    names = [RUNTIME_NAMES.get(r, r) for r in cmp.runtimes]
    doc.add(Table(
        ["platform", "model", "compression", "runtime", "median [95% CI]", "accuracy",
         "threads"],
        [[b.platform, b.model_label, b.compression_label, RUNTIME_NAMES.get(b.tuning, b.tuning),
          fmt_time(b) + _noisy(b), fmt_acc(b.accuracy), str(b.threads or "-")]
         for b in cmp.baselines],
        "Baselines: the compressed model in each runtime (threads matched to the target, "
        "batch 1, verified against the same reference as the TVM variants, timed the same "
        "way)."))
    if not cmp.rows:
        doc.add(Para("No verified TVM variant of the same model, compression and platform "
                     "to compare with."))
        return
    rows: list[list[Cell | str]] = []
    for r in cmp.rows:
        v = r.variant
        row: list[Cell | str] = [v.platform, v.model_label, v.compression_label,
                                 v.algorithm_label,
                                 v.tuning_label, fmt_time(v) + _noisy(v)]
        for runtime in cmp.runtimes:
            ratio = r.ratio(runtime)
            row.append("not comparable" if ratio is None and runtime in r.baselines
                       else fmt_ratio_vs(ratio))
        rows.append(row)
    doc.add(Table(["platform", "model", "compression", "algorithm", "tuning",
                   "TVM median [95% CI]",
                   *[f"vs {n}" for n in names]], rows,
                  "Every verified TVM variant against the baselines of its model, "
                  "compression and platform: how many times slower or faster TVM's median "
                  "time is than the baseline's."))


def _observations_section(doc: Document, points: list[ReportPoint], paper: Paper,
                          profiled: dict[str, ProfiledPoint]) -> None:
    """The thirteen observations; under each, the layers that decide it where the points
    it compared have profiles (`profiled`, by point key)."""
    doc.add(Heading("The paper's thirteen observations"))
    doc.add(Para("Each observation is tested on our verified results where the data allows; "
                 "the rule each test applies is stated with its numbers. The paper asserts "
                 "every observation (its verdict is 'held'); its numbers are beside ours. "
                 "'tie': the timings' 95% intervals leave it undecided. 'partly measured': "
                 "some of its parts lacked the data; what would decide a part is said under "
                 "it."))
    obs = observations(points, paper)
    rows: list[list[Cell | str]] = [
        [o.roman, o.claim, f"held: {o.paper_numbers}" if o.paper_numbers else "held",
         o.status_label, o.key_numbers] for o in obs]
    doc.add(Table(["#", "observation (paper)", "paper: verdict, numbers", "ours",
                   "our key numbers"], rows))
    for o in obs:
        doc.add(Heading(f"{o.roman}: {o.status_label}", 3))
        doc.add(Bullets([part.line(MAX_EVIDENCE) for part in o.parts]))
        if profiled:
            for head, lines in observation_layers(o, profiled):
                doc.add(Para(head))
                if lines:
                    doc.add(Bullets(lines))


def _simd(flags: list[str] | None) -> list[str]:
    """The SIMD ones of a CPU's /proc/cpuinfo flags (what the environment names)."""
    return [f for f in flags or [] if any(s in f for s in _SIMD)]


def _environment_section(doc: Document, points: list[ReportPoint]) -> None:
    doc.add(Heading("Environment"))
    envs: dict[str, tuple[dict[str, Any], list[ReportPoint]]] = {}
    for p in points:
        if not p.environment:
            continue
        key = repr(sorted((k, repr(v)) for k, v in p.environment.items()))
        envs.setdefault(key, (p.environment, []))[1].append(p)
    if not envs:
        doc.add(Para("No environment recorded."))
    for env, members in envs.values():
        cpu = env.get("cpu") or {}
        flags = _simd(cpu.get("flags"))
        threads = sorted({p.threads for p in members if p.threads is not None})
        versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)
        items = [
            f"CPU: {cpu.get('model', '?')} ({cpu.get('arch', env.get('machine', '?'))}), "
            f"{cpu.get('cores', '?')} usable cores of {env.get('cpu_count', '?')}; LLVM "
            f"-mcpu {cpu.get('mcpu', '?')} (from {cpu.get('mcpu_source', '?')})",
            f"SIMD flags: {' '.join(flags) or '-'}",
            f"threads used for timing: {', '.join(map(str, threads)) or '-'}; TVM_NUM_THREADS="
            f"{env.get('tvm_num_threads') or 'unset'}",
            f"targets: {', '.join(sorted({p.target_label for p in members}))}",
            f"platform: {env.get('platform', '?')}, Python {env.get('python', '?')}",
            f"versions: {versions or '-'}",
            f"dlas commit: {env.get('git_commit') or 'unknown'}",
            f"{len(members)} points",
        ]
        for extra in ("gpu", "remote"):
            if env.get(extra):
                items.append(f"{extra}: {env[extra]}")
        saved = env.get("cpuinfo_as")
        if saved:
            silicon = saved.get("silicon") or {}
            items.insert(1, (
                f"CPU flags read from DLAS_CPUINFO={saved.get('setting')}: the code paths are "
                f"that CPU's, the timings this machine's ({silicon.get('vendor', '?')} "
                f"{silicon.get('model', '?')}, family {silicon.get('family', '?')} model "
                f"{silicon.get('model_number', '?')}, SIMD "
                f"{' '.join(_simd(silicon.get('flags'))) or '-'}); do not read them as "
                "the named CPU's"))
        doc.add(Bullets(items))


def _verification_section(doc: Document, points: list[ReportPoint]) -> None:
    doc.add(Heading("Verification of every point"))
    bad = [p for p in points if p.status == "verification_failed"]
    doc.add(Para(
        "Every compiled variant is run on fixed inputs and compared with the PyTorch "
        "reference before it is timed. A point that failed verification computes a "
        f"different function and is never shown as a result above ({len(bad)} here)."))
    rows: list[list[Cell | str]] = []
    for p in points:
        note = p.error or ""
        if p.status == "ok" and not p.verified:
            note = "not verified: excluded from results"
        rows.append([p.describe(), Cell(p.status, p.status == "verification_failed"),
                     "yes" if p.verified else "no",
                     "-" if p.max_abs_diff is None else f"{p.max_abs_diff:.2e}",
                     "-" if p.top1_agreement is None else f"{100 * p.top1_agreement:.0f}%",
                     (note[:160] + "...") if len(note) > 160 else note])
    doc.add(Table(["point", "status", "verified", "max |diff|", "top-1 agreement", "note"],
                  rows))


# -- the report ------------------------------------------------------------------------------


def build_report(db_path: Path, out_dir: Path, *, sweeps: list[str] | None = None,
                 experiment: Experiment | None = None, profile: str | None = None,
                 notes: Iterable[str] = (), paper: Paper | None = None,
                 point_keys: set[str] | None = None) -> ReportFiles:
    """Write report.md, report.html and figures/*.png under `out_dir`.

    `point_keys`: the points of the sweeps as defined now (`dlas reproduce` passes them);
    without it, of rows showing the same point only the latest is used."""
    paper = paper or load_paper()
    if experiment is not None and not sweeps:
        sweeps = [experiment.profile(profile).sweep_name] if profile else experiment.sweep_names
    points = load_points(db_path, sweeps)
    notes = list(notes)
    if point_keys is not None:  # the sweeps as defined now: rows of older definitions go
        stale = sum(1 for p in points if p.key not in point_keys)
        points = [p for p in points if p.key in point_keys]
    else:
        points, stale = latest_per_label(points)
    if stale:
        notes.append(f"{stale} older rows of these sweeps (other budgets, parameters or "
                     "option versions than their latest run) are not shown.")
    if experiment is not None:  # an experiment reports its own dataset(s) only
        points = [p for p in points if paper.role(p.dataset) in (experiment.dataset, None)]
    out_dir.mkdir(parents=True, exist_ok=True)
    title = "dlas report" + (f": {experiment.title}" if experiment else "")
    doc = Document(title)
    files: list[Path] = []
    _header(doc, points, db_path, sweeps, experiment, profile, paper, notes)
    _accuracy_section(doc, points, paper, out_dir, files)
    _speed_section(doc, points, paper, experiment, out_dir, files)
    _layout_section(doc, points)
    _speedup_section(doc, points, paper, experiment)
    _baseline_section(doc, points)
    profiles = load_profiles(db_path, points)  # read once: two sections use them
    profile_section(doc, profiles, out_dir, files)  # only with stored profiles
    _observations_section(doc, points, paper,
                          {item.point.key: item for item in profiles.points})
    reproducibility_section(doc, points)
    same_work_section(doc, points)
    _environment_section(doc, points)
    _verification_section(doc, points)
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(to_markdown(doc, out_dir))
    page.write_text(to_html(doc))
    return ReportFiles(md, page, files, dict(Counter(p.status for p in points)))
