"""Results rows as report points: names resolved, platform and ratio derived, tolerantly.

The report reads databases written by every version of the runner, so a column that an
older database lacks (`compression_ratio`, `accuracy_source`) is derived or left `None`,
never guessed. Only points that ran *and* passed verification are results; every other
point is kept for the verification section and nowhere else.

Baseline rows (PyTorch eager, ONNX Runtime, measured in the same sweep) are not TVM results:
they have no algorithm in the paper's sense, so the paper's tables and analyses leave them
out and the baseline comparison (`tables.baseline_comparison`) puts them beside the TVM
variants of the same model, compression and platform.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Target option names whose code runs on a GPU; everything else is a CPU target.
GPU_TARGETS = frozenset({"cuda", "opencl", "vulkan", "rocm", "metal", "mali"})
_GPU_WORDS = re.compile(r"cuda|opencl|vulkan|rocm|metal|mali|gpu", re.IGNORECASE)

#: Baseline runtimes dlas ships; other baselines are recognised by the stand-in algorithm
#: the grid gives them (version "baseline") or by their registry tag.
BASELINE_RUNTIMES = frozenset({"pytorch", "onnxruntime"})
#: Display names of runtimes.
RUNTIME_NAMES = {"pytorch": "PyTorch", "onnxruntime": "ONNX Runtime"}

#: Ideal speedup of a reduced-precision option over float32 (bits saved).
PRECISION_RATIOS = {"float16": 2.0, "int8": 4.0, "int8_uncalibrated": 4.0}


def option_name(row: dict[str, Any], layer: str, column: str) -> str | None:
    """The option's registered name: from the stored config, else the label before '('."""
    choices = (row.get("config") or {}).get("choices") or {}
    name = (choices.get(layer) or {}).get("name")
    if name:
        return str(name)
    label = row.get(column)
    return str(label).split("(", 1)[0] if label else None


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


def _device_model(row: dict[str, Any], device: str) -> str:
    env = row.get("environment") or {}
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


def is_baseline_row(row: dict[str, Any]) -> bool:
    """Whether a row was measured in a baseline runtime rather than compiled by TVM."""
    choices = (row.get("config") or {}).get("choices") or {}
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
class Point:
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

    @property
    def family(self) -> str:
        return algorithm_family(self.algorithm)

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
                           self.algorithm, self.tuning, self.target_label))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def quartiles(row: dict[str, Any]) -> tuple[float | None, float | None]:
    """(Q1, Q3) of a row's timing samples: computed from the raw samples it stores (what
    the report promises to show), else its quartile columns, else unknown."""
    samples = row.get("latency_samples_ms")
    if isinstance(samples, list) and samples:
        import numpy as np

        q1, q3 = np.percentile(np.asarray(samples, dtype=np.float64), [25, 75])
        return float(q1), float(q3)
    return _float(row.get("latency_q1_ms")), _float(row.get("latency_q3_ms"))


def point_from_row(row: dict[str, Any]) -> Point:
    choices = (row.get("config") or {}).get("choices") or {}
    target = option_name(row, "targets", "target") or "?"
    # rows written since the runner records these facts carry them; older rows get them
    # from the option names
    device = row.get("device_kind") or device_kind(
        target, (choices.get("targets") or {}).get("params"))
    compression = option_name(row, "compression", "compression") or "?"
    info = row.get("compression_info") if isinstance(row.get("compression_info"), dict) else {}
    ratio = row.get("compression_ratio")
    if ratio is None and isinstance(info.get("compression_ratio"), (int, float)):
        ratio = info["compression_ratio"]
    if ratio is None:
        ratio = derive_ratio(compression, row.get("sparsity"), info,
                             (choices.get("compression") or {}).get("params"))
    chosen = info.get("chosen_level")
    target_label = str(row.get("target") or target)
    q1, q3 = quartiles(row) if row.get("latency_median_ms") is not None else (None, None)
    return Point(
        key=str(row.get("point_key")),
        sweep=str(row.get("sweep") or ""),
        status=str(row.get("status")),
        dataset=option_name(row, "datasets", "dataset") or "?",
        model=option_name(row, "models", "model") or "?",
        model_label=str(row.get("model") or "?"),
        compression=compression,
        compression_label=str(row.get("compression") or compression),
        algorithm=option_name(row, "algorithms", "algorithm") or "?",
        tuning=option_name(row, "tuning", "tuning") or "none",
        target=target,
        target_label=target_label,
        device=device,
        platform=f"{target_label} · {_device_model(row, device)}",
        accuracy=_float(row.get("accuracy")),
        dense_accuracy=_float(row.get("dense_accuracy")),
        accuracy_source=row.get("accuracy_source"),
        ort_accuracy=_float(row.get("ort_accuracy")),
        params=row.get("params"),
        macs=row.get("macs"),
        sparsity=_float(row.get("sparsity")),
        ratio=_float(ratio),
        latency_ms=_float(row.get("latency_median_ms")),
        latency_std_ms=_float(row.get("latency_std_ms")),
        threads=row.get("threads"),
        verified=bool(row.get("verified")),
        max_abs_diff=_float(row.get("max_abs_diff")),
        top1_agreement=_float(row.get("top1_agreement")),
        error_stage=row.get("error_stage"),
        error=row.get("error"),
        levels=tuple(lv for lv in info.get("levels") or () if isinstance(lv, dict)),
        chosen_level=_float(chosen) if isinstance(chosen, (int, float)) else None,
        updated_at=float(row.get("updated_at") or 0.0),
        environment=row.get("environment") or {},
        baseline=(row["backend"] != "tvm") if row.get("backend") else is_baseline_row(row),
        sparse=(row["weight_format"] == "csr") if row.get("weight_format") else
        is_sparse_format(option_name(row, "algorithms", "algorithm") or ""),
        latency_cv=_float(row.get("latency_cv")),
        noisy=bool(row.get("noisy")),
        latency_q1_ms=q1,
        latency_q3_ms=q3,
        noise_reason=row.get("noise_reason"),
    )


def load_points(db_path: Path, sweeps: Iterable[str] | None = None) -> list[Point]:
    """Every row of the database (optionally of some sweeps) as points, in run order."""
    from dlas.results.store import ResultStore

    wanted = set(sweeps) if sweeps else None
    with ResultStore(db_path) as store:
        rows = store.rows()
    return [point_from_row(r) for r in rows if wanted is None or r.get("sweep") in wanted]


def latest_per_label(points: Iterable[Point]) -> tuple[list[Point], int]:
    """Keep, of the rows that show the same point (sweep and every layer's label), the one
    written last; returns the kept points and how many were superseded.

    A point's key also hashes option versions and budgets, so re-running a sweep after an
    option's version bump or a budget change adds rows instead of replacing the old ones;
    those old rows describe code or budgets the sweep no longer runs."""
    points = list(points)
    latest: dict[tuple[str, ...], Point] = {}
    for p in points:
        label = (p.sweep, p.describe())
        if label not in latest or p.updated_at >= latest[label].updated_at:
            latest[label] = p
    kept = [p for p in points if latest[(p.sweep, p.describe())] is p]
    return kept, len(points) - len(kept)


def sweep_names(db_path: Path) -> list[str]:
    """The sweeps that have rows in the database."""
    from dlas.results.store import ResultStore

    with ResultStore(db_path) as store:
        return store.sweeps()


def results(points: Iterable[Point]) -> list[Point]:
    """The points that may be shown as results (ok, verified, timed)."""
    return [p for p in points if p.is_result]
