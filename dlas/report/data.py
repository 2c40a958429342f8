"""Results rows as report points: names resolved, platform and ratio derived, tolerantly.

The report reads databases written by every version of the runner, so a column that an
older database lacks (`compression_ratio`, `accuracy_source`) is derived or left `None`,
never guessed. Only points that ran *and* passed verification are results; every other
point is kept for the verification section and nowhere else.

Each point carries its activation layout (layer 4's data format beside the algorithm:
NCHW, NHWC, NCHW8c, ...); two layouts of one algorithm are two points, and the tables
decide between them (`dlas.report.tables`). Rows written before layouts were recorded, and
baseline rows, ran in NCHW, the paper's layout.

Baseline rows (PyTorch eager, ONNX Runtime, measured in the same sweep) are not TVM results:
they have no algorithm in the paper's sense, so the paper's tables and analyses leave them
out and the baseline comparison (`tables.baseline_comparison`) puts them beside the TVM
variants of the same model, compression and platform.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlas.measure.record import TimingRun
from dlas.results.row import ResultRow

#: Target option names whose code runs on a GPU; everything else is a CPU target.
GPU_TARGETS = frozenset({"cuda", "opencl", "vulkan", "rocm", "metal", "mali"})
_GPU_WORDS = re.compile(r"cuda|opencl|vulkan|rocm|metal|mali|gpu", re.IGNORECASE)

#: Baseline runtimes dlas ships; other baselines are recognised by the stand-in algorithm
#: the grid gives them (version "baseline") or by their registry tag.
BASELINE_RUNTIMES = frozenset({"pytorch", "onnxruntime"})
#: Display names of runtimes.
RUNTIME_NAMES = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime"}

#: The paper's activation layout: that of every row written before layouts were a
#: choice, and of every baseline.
NCHW = "NCHW"
#: Layouts in the order tables list them; channel-blocked ones (NCHW<b>c) after these, by
#: block width, then any other alphabetically.
LAYOUT_ORDER = [NCHW, "NHWC"]
_BLOCKED = re.compile(r"NCHW(\d+)c")

#: Ideal speedup of a reduced-precision option over float32 (bits saved).
PRECISION_RATIOS = {"float16": 2.0, "int8": 4.0, "int8_uncalibrated": 4.0}


def option_name(row: ResultRow, layer: str, column: str) -> str | None:
    """The option's registered name: from the stored config, else the label before '('."""
    choices = (row.config or {}).get("choices") or {}
    name = (choices.get(layer) or {}).get("name")
    if name:
        return str(name)
    label = getattr(row, column)
    return str(label).split("(", 1)[0] if label else None


def _image_size(choices: dict[str, Any]) -> int | None:
    side = ((choices.get("datasets") or {}).get("params") or {}).get("image_size")
    return side if isinstance(side, int) else None


def requested_layout(row: ResultRow) -> str:
    """The layout as the sweep config names it (the algorithm's `layout` and `block`
    parameters): "NCHWc" when the block is left to the target's SIMD width, which differs
    between platforms; NCHW when the parameters name none."""
    choices = (row.config or {}).get("choices") or {}
    params = (choices.get("algorithms") or {}).get("params") or {}
    layout = params.get("layout")
    if not layout:
        return NCHW
    block = params.get("block")
    if layout == "NCHWc" and isinstance(block, int):
        return f"NCHW{block}c"
    return str(layout)


def layout_of(row: ResultRow) -> str:
    """The activation layout a row ran in: its `layout` column (the block width resolved,
    "NCHW8c"); for a row that lacks it (written before the column, or failed before
    compiling), what the config asked for (`requested_layout`); NCHW, the paper's layout,
    when neither says."""
    return str(row.layout) if row.layout else requested_layout(row)


def layout_order(layouts: Iterable[str]) -> list[str]:
    """NCHW first (the paper's, what the others are compared with), NHWC, then the
    channel-blocked layouts by block width, then any other alphabetically."""
    def key(layout: str) -> tuple[int, int, str]:
        if layout in LAYOUT_ORDER:
            return (0, LAYOUT_ORDER.index(layout), layout)
        blocked = _BLOCKED.fullmatch(layout)
        return (1, int(blocked.group(1)), layout) if blocked else (2, 0, layout)

    return sorted(set(layouts), key=key)


def algorithm_family(algorithm: str) -> str:
    """`gemm_csr` -> `gemm`: the paper's algorithm, whatever its data format."""
    return algorithm[: -len("_csr")] if algorithm.endswith("_csr") else algorithm


def is_sparse_format(algorithm: str) -> bool:
    return algorithm.endswith("_csr")


def derive_ratio(compression: str, sparsity: float | None, info: dict[str, Any] | None,
                 params: dict[str, Any] | None = None) -> float | None:
    """The ideal speedup a compression promises, when the row does not store it.

    Pruning: 1/(1-s) for the achieved sparsity s (95% -> 20x); float16 2x; int8 4x.
    `None` when it cannot be known (an unknown option with no sparsity recorded).
    """
    if compression == "none":
        return 1.0
    if compression in PRECISION_RATIOS:
        return PRECISION_RATIOS[compression]
    info = info or {}
    s = sparsity if sparsity else None
    for candidate in (info.get("chosen_sparsity"), info.get("chosen_level"),
                      (params or {}).get("sparsity")):
        if s is None and isinstance(candidate, (int, float)) and 0 < candidate < 1:
            s = float(candidate)
    if s is None or not 0 < s < 1:
        return None
    return 1.0 / (1.0 - s)


def _device_model(row: ResultRow, device: str) -> str:
    env = row.environment or {}
    if device == "gpu":
        gpu = env.get("gpu")
        if isinstance(gpu, dict) and gpu.get("model"):
            return str(gpu["model"])
        if isinstance(gpu, str) and gpu:
            return gpu
        remote = env.get("remote") or {}
        if isinstance(remote, dict) and remote.get("device"):
            return str(remote["device"])
        return "unknown GPU"
    remote = env.get("remote")
    if isinstance(remote, dict) and remote.get("cpu"):
        return str(remote["cpu"])
    cpu = env.get("cpu") or {}
    return str(cpu.get("model") or env.get("machine") or "unknown CPU")


def is_baseline_row(row: ResultRow) -> bool:
    """Whether a row was measured in a baseline runtime rather than compiled by TVM."""
    choices = (row.config or {}).get("choices") or {}
    if (choices.get("algorithms") or {}).get("version") == "baseline":
        return True
    tuning = option_name(row, "tuning", "tuning")
    if tuning is None or tuning == "none":
        return False
    if tuning in BASELINE_RUNTIMES:
        return True
    try:
        from dlas import registry

        return "baseline" in registry.get("tuning", tuning).tags
    except Exception:  # noqa: BLE001 - an option no longer installed: not a known baseline
        return False


def device_kind(target: str, target_params: dict[str, Any] | None) -> str:
    """'gpu' or 'cpu' for a target option and its parameters."""
    if target in GPU_TARGETS:
        return "gpu"
    for key in ("device", "kind", "device_type"):
        value = (target_params or {}).get(key)
        if isinstance(value, str) and _GPU_WORDS.search(value):
            return "gpu"
    return "cpu"


@dataclass(frozen=True)
class ReportPoint:
    """One results row, as the report needs it."""

    key: str
    sweep: str
    status: str
    dataset: str
    model: str
    model_label: str
    compression: str
    compression_label: str
    algorithm: str
    tuning: str
    target: str
    target_label: str
    device: str
    platform: str
    accuracy: float | None = None
    dense_accuracy: float | None = None
    accuracy_source: str | None = None
    ort_accuracy: float | None = None
    params: int | None = None
    macs: int | None = None
    sparsity: float | None = None
    ratio: float | None = None
    latency_ms: float | None = None
    latency_std_ms: float | None = None
    threads: int | None = None
    verified: bool = False
    max_abs_diff: float | None = None
    top1_agreement: float | None = None
    error_stage: str | None = None
    error: str | None = None
    levels: tuple[dict[str, Any], ...] = ()
    chosen_level: float | None = None
    updated_at: float = 0.0
    environment: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: Measured in a baseline runtime (PyTorch, ONNX Runtime), not a TVM variant.
    baseline: bool = False
    #: Weights in a sparse (CSR) format.
    sparse: bool = False
    latency_cv: float | None = None
    noisy: bool = False
    #: Quartiles of the timing samples (from the raw samples where the row has them):
    #: the whiskers of the figures and the IQR beside the median in tables.
    latency_q1_ms: float | None = None
    latency_q3_ms: float | None = None
    #: Why the point is flagged noisy, when it is.
    noise_reason: str | None = None
    #: The median's 95% confidence interval, and the vCPU placement it was taken in.
    latency_ci_low_ms: float | None = None
    latency_ci_high_ms: float | None = None
    #: This machine's run-to-run drift for its runtime, |log ratio| (`dlas.results.drift`):
    #: what a comparison with a point timed apart from it adds to their ratio's interval.
    next_run_drift: float | None = None
    placement: str | None = None
    #: Every timing run of the point (what comparisons resample; empty for rows written
    #: before the history existed, which compare by their intervals).
    runs: tuple[TimingRun, ...] = field(default=(), compare=False, repr=False)
    #: The activation layout it ran in (`layout_of`): NCHW, NHWC, NCHW8c, ...
    layout: str = NCHW
    #: The layout as the sweep config names it (`requested_layout`): what matches one
    #: point across platforms, where NCHWc resolves to different block widths.
    layout_choice: str = NCHW
    #: Numeric format of the convolutions (float32, float16, int8); None for old rows.
    precision: str | None = None
    #: The side images were resized to where the dataset option has an `image_size`
    #: (digits: 32 by default, the quickstart's 16); None where it has none.
    image_size: int | None = None

    @property
    def runtime(self) -> str:
        """What ran it: 'tvm', or the baseline's runtime ('onnxruntime', 'pytorch')."""
        return self.tuning if self.baseline else "tvm"

    @property
    def family(self) -> str:
        return algorithm_family(self.algorithm)

    @property
    def algorithm_label(self) -> str:
        """The algorithm as a reader needs it named: with its layout when that is not the
        paper's NCHW ("direct NCHW8c"), so two layouts of one algorithm never read as the
        same point, and a sweep without layouts reads as before."""
        return self.algorithm if self.layout == NCHW else f"{self.algorithm} {self.layout}"

    @property
    def latency_iqr_ms(self) -> float | None:
        if self.latency_q1_ms is None or self.latency_q3_ms is None:
            return None
        return self.latency_q3_ms - self.latency_q1_ms

    @property
    def tuned(self) -> bool:
        return self.tuning != "none"

    @property
    def tuning_label(self) -> str:
        return "untuned" if not self.tuned else f"tuned ({self.tuning})"

    @property
    def is_timed(self) -> bool:
        """Ran, passed verification against its reference, and has a timing."""
        return self.status == "ok" and self.verified and self.latency_ms is not None

    @property
    def is_result(self) -> bool:
        """A TVM variant that ran, passed verification and has a timing: what the paper's
        tables and analyses are built from (baselines are compared separately)."""
        return self.is_timed and not self.baseline

    @property
    def is_baseline_result(self) -> bool:
        return self.is_timed and self.baseline

    def describe(self) -> str:
        return " / ".join((self.dataset, self.model_label, self.compression_label,
                           self.algorithm_label, self.tuning, self.target_label))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def quartiles(row: ResultRow) -> tuple[float | None, float | None]:
    """(Q1, Q3) of a row's timing samples: computed from the raw samples it stores (what
    the report promises to show), else its quartile columns, else unknown."""
    samples = row.latency_samples_ms
    if samples:
        from dlas.results.statistics import summarize

        summary = summarize(samples)
        return summary.q1, summary.q3
    return _float(row.latency_q1_ms), _float(row.latency_q3_ms)


def point_from_row(row: ResultRow, runs: Iterable[TimingRun] = ()) -> ReportPoint:
    choices = (row.config or {}).get("choices") or {}
    target = option_name(row, "targets", "target") or "?"
    # rows written since the runner records these facts carry them; older rows get them
    # from the option names
    device = row.device_kind or device_kind(
        target, (choices.get("targets") or {}).get("params"))
    compression = option_name(row, "compression", "compression") or "?"
    info = row.compression_info if isinstance(row.compression_info, dict) else {}
    ratio = row.compression_ratio
    if ratio is None and isinstance(info.get("compression_ratio"), (int, float)):
        ratio = info["compression_ratio"]
    if ratio is None:
        ratio = derive_ratio(compression, row.sparsity, info,
                             (choices.get("compression") or {}).get("params"))
    chosen = info.get("chosen_level")
    target_label = str(row.target or target)
    q1, q3 = quartiles(row) if row.latency_median_ms is not None else (None, None)
    return ReportPoint(
        key=row.point_key,
        sweep=str(row.sweep or ""),
        status=row.status,
        dataset=option_name(row, "datasets", "dataset") or "?",
        image_size=_image_size(choices),
        model=option_name(row, "models", "model") or "?",
        model_label=str(row.model or "?"),
        compression=compression,
        compression_label=str(row.compression or compression),
        algorithm=option_name(row, "algorithms", "algorithm") or "?",
        tuning=option_name(row, "tuning", "tuning") or "none",
        target=target,
        target_label=target_label,
        device=device,
        platform=f"{target_label} · {_device_model(row, device)}",
        accuracy=_float(row.accuracy),
        dense_accuracy=_float(row.dense_accuracy),
        accuracy_source=row.accuracy_source,
        ort_accuracy=_float(row.ort_accuracy),
        params=row.params,
        macs=row.macs,
        sparsity=_float(row.sparsity),
        ratio=_float(ratio),
        latency_ms=_float(row.latency_median_ms),
        latency_std_ms=_float(row.latency_std_ms),
        threads=row.threads,
        verified=bool(row.verified),
        max_abs_diff=_float(row.max_abs_diff),
        top1_agreement=_float(row.top1_agreement),
        error_stage=row.error_stage,
        error=row.error,
        levels=tuple(lv for lv in info.get("levels") or () if isinstance(lv, dict)),
        chosen_level=_float(chosen) if isinstance(chosen, (int, float)) else None,
        updated_at=float(row.updated_at or 0.0),
        environment=row.environment or {},
        baseline=(row.backend != "tvm") if row.backend else is_baseline_row(row),
        sparse=(row.weight_format == "csr") if row.weight_format else
        is_sparse_format(option_name(row, "algorithms", "algorithm") or ""),
        latency_cv=_float(row.latency_cv),
        noisy=bool(row.noisy),
        latency_q1_ms=q1,
        latency_q3_ms=q3,
        noise_reason=row.noise_reason,
        latency_ci_low_ms=_float(row.latency_ci_low_ms),
        latency_ci_high_ms=_float(row.latency_ci_high_ms),
        next_run_drift=_float(row.next_run_drift),
        placement=row.placement,
        runs=tuple(runs),
        layout=layout_of(row),
        layout_choice=requested_layout(row),
        precision=row.precision,
    )


def load_points(db_path: Path, sweeps: Iterable[str] | None = None) -> list[ReportPoint]:
    """Every row of the database (optionally the members of some sweeps) as points, in
    run order, each with its timing history. A point listed by several of the sweeps
    appears once per sweep, so each sweep's tables are whole."""
    from dlas.results.store import ResultStore

    out = []
    with ResultStore(db_path) as store:
        if sweeps:
            listed = [(sweep, store.rows(sweep=sweep)) for sweep in sweeps]
        else:
            listed = [(None, store.rows())]
        for sweep, rows in listed:
            for row in rows:
                point = point_from_row(row, store.timing_runs(row.point_key, row.timing_key))
                out.append(point if sweep is None else replace(point, sweep=sweep))
    return out


def latest_per_label(points: Iterable[ReportPoint]) -> tuple[list[ReportPoint], int]:
    """Keep, of the rows that show the same point (sweep, every layer's label and the
    layout), the one written last; returns the kept points and how many were superseded.

    A point's key also hashes option versions and budgets, so re-running a sweep after an
    option's version bump or a budget change adds rows instead of replacing the old ones;
    those old rows describe code or budgets the sweep no longer runs."""
    points = list(points)
    latest: dict[tuple[str, ...], ReportPoint] = {}
    for p in points:
        label = (p.sweep, p.describe())
        if label not in latest or p.updated_at >= latest[label].updated_at:
            latest[label] = p
    kept = [p for p in points if latest[(p.sweep, p.describe())] is p]
    return kept, len(points) - len(kept)


def sweep_names(db_path: Path) -> list[str]:
    """The sweeps that have points in the database (written or listed by them)."""
    from dlas.results.store import ResultStore

    with ResultStore(db_path) as store:
        return store.sweeps()


def results(points: Iterable[ReportPoint]) -> list[ReportPoint]:
    """The points that may be shown as results (ok, verified, timed)."""
    return [p for p in points if p.is_result]
