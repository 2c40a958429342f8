"""Run a sweep: every point through the stage graph, cached, resumable, failure-tolerant.

- A stage whose key is in the cache is loaded, never recomputed; within one run each stage
  output is computed at most once and shared by every point that needs it.
- A failing point is recorded (stage, error, traceback) and the sweep goes on, unless
  `fail_fast`. A shared stage that failed fails its dependants without being retried.
- Ctrl-C stops the sweep; everything completed so far is in the cache and the database,
  and training resumes from its last epoch checkpoint, so re-running picks up from there.
"""

from __future__ import annotations

import copy
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlas import registry
from dlas.results.environment import capture_environment
from dlas.results.store import ResultStore
from dlas.runner import stages
from dlas.runner.cache import Cache
from dlas.runner.console import RunConsole
from dlas.sweep.config import Budgets, SweepConfig
from dlas.sweep.grid import Point, expand


class StageFailed(Exception):
    """A stage raised; carries which stage, for the record and for dependants."""

    def __init__(self, stage: str, error: BaseException, tb: str) -> None:
        super().__init__(f"{stage}: {type(error).__name__}: {error}")
        self.stage, self.error, self.tb = stage, error, tb


class VerificationFailed(Exception):
    pass


@dataclass
class RunReport:
    points: int = 0
    ok: int = 0
    failed: int = 0
    verification_failed: int = 0
    not_runnable: int = 0
    skipped_failed: int = 0
    interrupted: bool = False
    computed: Counter[str] = field(default_factory=Counter)
    reused: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    wall_seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recomputed_nothing(self) -> bool:
        return not any(self.computed[s] for s in stages.STAGES if s != "data")


@dataclass
class Workspace:
    """Where a sweep's cache and results live (default: ./dlas-workspace)."""

    root: Path
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.cache_dir = Path(self.cache_dir) if self.cache_dir else self.root / "cache"

    @property
    def db_path(self) -> Path:
        return self.root / "results.db"


class Runner:
    def __init__(self, workspace: Workspace, *, progress: bool = True,
                 console: RunConsole | None = None) -> None:
        self.workspace = workspace
        self.cache = Cache(workspace.cache_dir)
        self.console = console or RunConsole(progress=progress)
        self.progress = self.console.progress
        self._memo: dict[tuple[str, str], Any] = {}
        self.report = RunReport()

    # -- stage machinery ---------------------------------------------------------------

    def _memoized(self, name: str, key: str, produce: Callable[[], Any]) -> Any:
        """Produce a stage output once per run; a failure is remembered and re-raised for
        every dependant point instead of being retried."""
        memo_key = (name, key)
        if memo_key in self._memo:
            value = self._memo[memo_key]
            if isinstance(value, StageFailed):
                raise value
            return value
        try:
            value = produce()
        except (KeyboardInterrupt, StageFailed):
            raise
        except Exception as exc:
            failure = StageFailed(name, exc, traceback.format_exc())
            self._memo[memo_key] = failure
            raise failure from exc
        self._memo[memo_key] = value
        return value

    def _computed(self, name: str, start: float) -> float:
        elapsed = time.perf_counter() - start
        self.report.computed[name] += 1
        self.report.seconds[name] += elapsed
        return elapsed

    def _stage(self, name: str, key: str, compute: Callable[[Path, dict[str, Any]], None],
               load: Callable[[Path, dict[str, Any]], Any]) -> Any:
        """A cached stage: load its entry if present, else compute it into the cache."""

        def produce() -> Any:
            if self.cache.has(name, key):
                self.report.reused[name] += 1
                self.console.stage(name, "reused", key)
            else:
                self.console.stage(name, "running", key)
                start = time.perf_counter()
                meta: dict[str, Any] = {"stage": name, "key": key}
                with self.cache.write(name, key, meta) as tmp:
                    compute(tmp, meta)
                    meta["seconds"] = time.perf_counter() - start
                self.console.stage(name, "done", key, self._computed(name, start))
            return load(self.cache.path(name, key), self.cache.meta(name, key))

        return self._memoized(name, key, produce)

    def _fit_settings(self, b: Budgets, stage: str, key: str, what: str = "train") -> Any:
        from dlas.models.training import FitSettings

        return FitSettings(batch_size=b.batch_size, data_fraction=b.data_fraction, seed=b.seed,
                           checkpoint_dir=self.cache.scratch(stage, key),
                           progress=self.progress, on_epoch=self.console.epoch_reporter(what))

    # -- the stages --------------------------------------------------------------------

    def _data(self, point: Point, keys: stages.StageKeys) -> Any:
        """Datasets are their own cache (files on disk); loading is memoized, not stored."""
        choice = point.datasets

        def produce() -> Any:
            start = time.perf_counter()
            bundle = choice.option.fn(choice.params, seed=point.budgets.seed)
            self.console.stage("data", "loaded", keys.data, self._computed("data", start))
            return bundle

        return self._memoized("data", keys.data, produce)

    def _train(self, point: Point, keys: stages.StageKeys) -> tuple[Any, dict[str, Any]]:
        import torch

        from dlas.models.macs import count_macs, count_params
        from dlas.models.training import evaluate, train_model

        bundle = self._data(point, keys)
        b = point.budgets
        choice = point.models

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            torch.manual_seed(b.seed)
            model = choice.option.fn(choice.params, num_classes=bundle.num_classes,
                                     input_shape=bundle.input_shape)
            if b.epochs > 0:
                result = train_model(model, bundle, b.epochs, max_lr=b.max_lr,
                                     settings=self._fit_settings(b, "train", keys.train))
                model, meta["history"] = result.model, result.history
            model.eval()
            meta["accuracy"] = evaluate(model, bundle.test)
            meta["params"] = count_params(model)
            meta["macs"] = count_macs(model, bundle.input_shape)
            torch.save(model, tmp / "model.pt")

        def load(path: Path, meta: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            return torch.load(path / "model.pt", weights_only=False).eval(), meta

        return self._stage("train", keys.train, compute, load)

    def _compress(self, point: Point, keys: stages.StageKeys) -> tuple[Any, dict[str, Any]]:
        import torch

        from dlas.compression.base import CompressionContext
        from dlas.compression.pruning import conv_sparsity
        from dlas.models.macs import count_macs, count_params
        from dlas.models.training import evaluate, fine_tune

        bundle = self._data(point, keys)
        dense, train_meta = self._train(point, keys)
        b = point.budgets
        choice = point.compression

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            settings = self._fit_settings(b, "compress", keys.compress, what="fine-tune")
            ctx = CompressionContext(
                bundle=bundle, budgets=b, dense_accuracy=train_meta["accuracy"],
                fit_settings=settings,
                evaluate=lambda m: evaluate(m, bundle.test),
                fine_tune=lambda m, epochs: fine_tune(m, bundle, epochs, lr=b.finetune_lr,
                                                      settings=settings).model,
            )
            result = choice.option.fn(choice.params, copy.deepcopy(dense), ctx)
            model = result.model.eval()
            torch.save(model, tmp / "model.pt")
            params = count_params(model)
            nonzero = int(sum(int(torch.count_nonzero(p)) for p in model.parameters()))
            meta.update(
                info=result.info,
                accuracy=evaluate(model, bundle.test),
                dense_accuracy=train_meta["accuracy"],
                params=params,
                nonzero_params=nonzero,
                macs=count_macs(model, bundle.input_shape),
                sparsity=conv_sparsity(model),
                size_bytes=(tmp / "model.pt").stat().st_size,
            )

        def load(path: Path, meta: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            return torch.load(path / "model.pt", weights_only=False).eval(), meta

        return self._stage("compress", keys.compress, compute, load)

    def _import(self, point: Point, keys: stages.StageKeys) -> tuple[Any, np.ndarray, np.ndarray]:
        import torch

        from dlas.compiler.relax_import import import_torch_model, load_imported, save_imported
        from dlas.datasets.base import fixed_batch

        bundle = self._data(point, keys)
        model, _ = self._compress(point, keys)
        b = point.budgets

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            imported = import_torch_model(model, (1, *bundle.input_shape))
            save_imported(imported, tmp / "relax")
            inputs = fixed_batch(bundle.test, b.verify_samples, b.seed)
            with torch.no_grad():
                outputs = model(inputs)
            np.savez(tmp / "reference.npz", inputs=inputs.numpy(), outputs=outputs.numpy())
            meta["input_shape"] = list(imported.input_shape)

        def load(path: Path, meta: dict[str, Any]) -> tuple[Any, np.ndarray, np.ndarray]:
            ref = np.load(path / "reference.npz")
            return load_imported(path / "relax"), ref["inputs"], ref["outputs"]

        return self._stage("import", keys.import_, compute, load)

    def _compile(self, point: Point, keys: stages.StageKeys) -> tuple[Path, dict[str, Any]]:
        from dlas.compiler.build import compile_model
        from dlas.tuning.base import TuningContext

        imported, _, _ = self._import(point, keys)
        target = stages.resolve_target(point)

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            algorithm = point.algorithms.option.fn(point.algorithms.params)
            tuning_ctx = TuningContext(target=target, budgets=point.budgets,
                                       work_dir=self.workspace.root / "tuning",
                                       progress=self.progress)
            start = time.perf_counter()
            hook = point.tuning.option.fn(point.tuning.params, tuning_ctx)
            meta["tuning_s"] = time.perf_counter() - start
            with self.console.activity(f"compiling with {point.algorithms.label}"):
                result = compile_model(imported, algorithm, target.tvm_target, tmp,
                                       schedule_hook=hook)
            meta.update(
                executable=result.executable_path.name,
                fallbacks=result.fallbacks,
                schedule_warnings=result.schedule_warnings,
                conv_count=result.conv_count,
                compile_s=result.compile_seconds,
                tvm_target=target.tvm_target,
            )

        def load(path: Path, meta: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
            return path / meta["executable"], meta

        return self._stage("compile", keys.compile, compute, load)

    def _measure(self, point: Point, keys: stages.StageKeys) -> dict[str, Any]:
        from dlas.measure.timing import load_vm, run_batch, set_num_threads, time_vm
        from dlas.measure.verify import verify_outputs

        _, ref_inputs, ref_outputs = self._import(point, keys)
        executable, _ = self._compile(point, keys)
        b = point.budgets

        threads = stages.resolve_target(point).num_threads

        def compute(_tmp: Path, meta: dict[str, Any]) -> None:
            vm = load_vm(executable)
            if threads:
                meta["threads"] = set_num_threads(threads)
            got = run_batch(vm, ref_inputs)
            verification = verify_outputs(got, ref_outputs)
            meta["verification"] = verification.as_dict()
            if not verification.passed:
                meta["error"] = verification.explain()
                return  # a variant computing another function is not timed
            x = ref_inputs[:1]
            samples: list[float] = []
            chunk = max(1, min(25, b.measure_repeat // 10 or 1))
            with self.console.measuring(b.measure_repeat) as advance:
                while len(samples) < b.measure_repeat:
                    n = min(chunk, b.measure_repeat - len(samples))
                    samples += time_vm(vm, x, repeat=n, number=b.measure_number,
                                       warmup=b.warmup if not samples else 0)
                    advance(n)
            meta["samples_ms"] = [s * 1e3 for s in samples]

        return self._stage("measure", keys.measure, compute, lambda p, m: m)

    # -- a point -----------------------------------------------------------------------

    def run_point(self, point: Point, sweep: str) -> dict[str, Any]:
        row: dict[str, Any] = {
            "point_key": point.key, "sweep": sweep,
            **{col: point.labels()[layer] for col, layer in _LAYER_COLUMNS.items()},
            "config": {
                "choices": {layer: c.identity() for layer, c in point.choices.items()},
                "budgets": point.budgets.model_dump(mode="json"),
            },
            "environment": capture_environment(),
            "measure_repeat": point.budgets.measure_repeat,
        }
        if point.blocked:
            row.update(status="not_runnable", error=point.blocked)
            return row
        keys = stages.stage_keys(point)
        before = dict(self.report.seconds)
        try:
            _, train_meta = self._train(point, keys)
            _, comp_meta = self._compress(point, keys)
            _, compile_meta = self._compile(point, keys)
            measured = self._measure(point, keys)
        except StageFailed as failure:
            row.update(status="failed", error_stage=failure.stage,
                       error=f"{type(failure.error).__name__}: {failure.error}",
                       traceback=failure.tb)
            return row
        finally:
            row["stage_seconds"] = {s: self.report.seconds[s] - before.get(s, 0.0)
                                    for s in stages.STAGES}
        verification = measured["verification"]
        row.update(
            accuracy=comp_meta["accuracy"],
            dense_accuracy=train_meta["accuracy"],
            params=comp_meta["params"], nonzero_params=comp_meta["nonzero_params"],
            macs=comp_meta["macs"], sparsity=comp_meta["sparsity"],
            size_bytes=comp_meta["size_bytes"],
            compile_s=compile_meta["compile_s"], tuning_s=compile_meta["tuning_s"],
            conv_fallbacks=compile_meta["fallbacks"],
            train_history=train_meta.get("history"),
            compression_info=comp_meta["info"],
            verified=int(verification["passed"]),
            max_abs_diff=verification["max_abs_diff"],
            threads=measured.get("threads"),
            top1_agreement=verification["top1_agreement"],
        )
        if not verification["passed"]:
            row.update(status="verification_failed", error_stage="measure",
                       error=measured["error"])
            return row
        samples = np.asarray(measured["samples_ms"])
        row.update(
            status="ok",
            latency_median_ms=float(np.median(samples)),
            latency_mean_ms=float(samples.mean()),
            latency_std_ms=float(samples.std()),
            latency_min_ms=float(samples.min()),
            latency_max_ms=float(samples.max()),
            latency_samples_ms=samples.tolist(),
        )
        return row

    # -- a sweep -----------------------------------------------------------------------

    def run(self, config: SweepConfig, *, fail_fast: bool = False,
            retry_failed: bool = False) -> RunReport:
        registry.load_plugins()
        start = time.perf_counter()
        points = expand(config)
        self.report = report = RunReport(points=len(points))
        self.console.sweep_header(config, points, self.workspace)
        with ResultStore(self.workspace.db_path) as store:
            try:
                for i, point in enumerate(points, 1):
                    previous = store.get(point.key)
                    was_failed = previous is not None and previous["status"] in (
                        "failed", "verification_failed")
                    if retry_failed and not was_failed:
                        continue
                    if was_failed and not retry_failed:
                        report.skipped_failed += 1
                        self.console.point_skipped(i, len(points), point, previous)
                        report.rows.append(previous)
                        continue
                    self.console.point_start(i, len(points), point)
                    row = self.run_point(point, config.name)
                    store.upsert(row)
                    report.rows.append(row)
                    status = row["status"]
                    setattr(report, status, getattr(report, status) + 1)
                    self.console.point_end(row)
                    if fail_fast and status in ("failed", "verification_failed"):
                        self.console.note("stopping: --fail-fast and a point failed")
                        break
            except KeyboardInterrupt:
                report.interrupted = True
            finally:
                report.wall_seconds = time.perf_counter() - start
                self.console.summary(report)
        return report


_LAYER_COLUMNS = {"dataset": "datasets", "model": "models", "compression": "compression",
                  "algorithm": "algorithms", "tuning": "tuning", "target": "targets"}
