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
from dlas.results.store import ResultStore, latency_columns
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
            _check_verify_samples(bundle, point.budgets.verify_samples)
            self.console.stage("data", "loaded", keys.data, self._computed("data", start))
            return bundle

        return self._memoized("data", keys.data, produce)

    def _train(self, point: Point, keys: stages.StageKeys) -> tuple[Any, dict[str, Any]]:
        """Train the model option's module; a "pretrained" option's module is used as built.

        Accuracy is the test accuracy, or None for a pretrained option whose module says
        its real weights were not loaded (`dlas_pretrained` false): a number for random
        weights would be mistaken for a result.
        """
        import torch

        from dlas.models.macs import count_macs, count_params
        from dlas.models.training import evaluate, train_model

        bundle = self._data(point, keys)
        b = point.budgets
        choice = point.models
        pretrained = stages.is_pretrained(point)

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            torch.manual_seed(b.seed)
            model = choice.option.fn(choice.params, num_classes=bundle.num_classes,
                                     input_shape=bundle.input_shape)
            if pretrained:
                meta.update(pretrained=True, history=[],
                            weights_loaded=bool(getattr(model, "dlas_pretrained", False)))
            elif b.epochs > 0:
                result = train_model(model, bundle, b.epochs, max_lr=b.max_lr,
                                     settings=self._fit_settings(b, "train", keys.train))
                model, meta["history"] = result.model, result.history
            model.eval()
            if pretrained and not meta["weights_loaded"]:
                meta["accuracy"] = None
            else:
                meta["accuracy"] = evaluate(model, bundle.test)
            meta["params"] = count_params(model)
            meta["macs"] = count_macs(model, bundle.input_shape)
            torch.save(model, tmp / "model.pt")

        def load(path: Path, meta: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            return torch.load(path / "model.pt", weights_only=False).eval(), meta

        return self._stage("train", keys.train, compute, load)

    def _compress(self, point: Point, keys: stages.StageKeys) -> Compressed:
        """Apply the compression option; store the model and, for int8, the quantized ONNX.

        Accuracy here is PyTorch's for float32 results. A reduced-precision result is only
        what it computes once compiled, so its accuracy is measured on the TVM module (in
        the measure stage); int8 also gets ONNX Runtime's accuracy on the same QDQ model.
        """
        import torch

        from dlas.compression.base import CompressionContext, Float16Conversion, QuantizedOnnx
        from dlas.compression.pruning import conv_sparsity
        from dlas.models.macs import count_macs, count_params
        from dlas.models.training import evaluate, fine_tune

        bundle = self._data(point, keys)
        dense, train_meta = self._train(point, keys)
        b = point.budgets
        choice = point.compression
        accuracy_available = train_meta["accuracy"] is not None

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            settings = self._fit_settings(b, "compress", keys.compress, what="fine-tune")
            ctx_bundle = _with_train_split_check(bundle, point)
            ctx = CompressionContext(
                bundle=ctx_bundle, budgets=b, dense_accuracy=train_meta["accuracy"],
                fit_settings=settings,
                evaluate=lambda m: evaluate(m, bundle.test),
                fine_tune=lambda m, epochs: fine_tune(m, ctx_bundle, epochs, lr=b.finetune_lr,
                                                      settings=settings).model,
                model_name=point.models.name,
            )
            result = choice.option.fn(choice.params, copy.deepcopy(dense), ctx)
            for warning in result.warnings:
                self.console.note(f"{choice.label}: {warning}")
            if result.warnings:
                result.info["warnings"] = list(result.warnings)
            model = result.model.eval()
            precision = result.precision
            torch.save(model, tmp / "model.pt")
            size = (tmp / "model.pt").stat().st_size
            accuracy = ort_accuracy = None
            deployment = result.deployment
            if isinstance(deployment, QuantizedOnnx):
                from dlas.compression.int8 import OrtModel

                (tmp / QUANTIZED_ONNX).write_bytes(deployment.model)
                size = len(deployment.model)
                if accuracy_available:
                    ort_accuracy = OrtModel(deployment.model).accuracy(bundle.test)
                meta["deployment"] = {"onnx": QUANTIZED_ONNX}
            elif isinstance(deployment, Float16Conversion):
                size = _float16_size(model)
                meta["deployment"] = {"accumulate": deployment.accumulate}
            elif accuracy_available:
                accuracy = evaluate(model, bundle.test)
            params = count_params(model)
            nonzero = int(sum(int(torch.count_nonzero(p)) for p in model.parameters()))
            meta.update(
                info=result.info,
                precision=precision,
                accuracy=accuracy,
                ort_accuracy=ort_accuracy,
                dense_accuracy=train_meta["accuracy"],
                params=params,
                nonzero_params=nonzero,
                macs=count_macs(model, bundle.input_shape),
                sparsity=conv_sparsity(model),
                size_bytes=size,
            )

        def load(path: Path, meta: dict[str, Any]) -> Compressed:
            model = torch.load(path / "model.pt", weights_only=False).eval()
            return Compressed(model, meta, path)

        return self._stage("compress", keys.compress, compute, load)

    def _import(self, point: Point, keys: stages.StageKeys) -> Imported:
        """Import the deployed form into Relax, with the outputs it must reproduce.

        `reference.npz` holds the verification inputs, `outputs` (what the compiled model
        must compute: PyTorch's output, or an int8 QDQ model's literal function) and
        `fp32_outputs` (the float32 PyTorch model's, for the record).
        """
        import torch

        from dlas.compiler.quantized import conv_dtypes
        from dlas.compiler.relax_import import import_torch_model, load_imported, save_imported
        from dlas.datasets.base import fixed_batch

        bundle = self._data(point, keys)
        compressed = self._compress(point, keys)
        model, comp_meta = compressed.model, compressed.meta
        precision = comp_meta["precision"]
        b = point.budgets

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            input_shape = (1, *bundle.input_shape)
            inputs = fixed_batch(bundle.test, b.verify_samples, b.seed)
            with torch.no_grad():
                fp32_outputs = model(inputs).numpy()
            outputs, reference = fp32_outputs, "pytorch"
            if precision == "int8":
                from dlas.compiler.quantized import import_qdq_onnx, output_step
                from dlas.compression.int8 import literal_qdq

                onnx_bytes = (compressed.path / comp_meta["deployment"]["onnx"]).read_bytes()
                imported, report = import_qdq_onnx(onnx_bytes, input_shape)
                meta["int8_convs"] = report.as_dict()
                meta["output_step"] = output_step(onnx_bytes)
                # the QDQ graph's own function, not whichever fused int8 kernels a runtime
                # picks on this CPU (dlas.compression.int8)
                outputs, reference = literal_qdq(onnx_bytes)(inputs.numpy()), "qdq"
            else:
                imported = import_torch_model(model, input_shape)
                if precision == "float16":
                    from dlas.compiler.precision import convert_float16

                    imported = convert_float16(imported, comp_meta["deployment"]["accumulate"])
            save_imported(imported, tmp / "relax")
            np.savez(tmp / "reference.npz", inputs=inputs.numpy(), outputs=outputs,
                     fp32_outputs=fp32_outputs)
            dtypes = conv_dtypes(imported.mod)
            meta.update(input_shape=list(imported.input_shape), precision=precision,
                        reference=reference, conv_dtypes=[list(d) for d in dtypes],
                        precision_fallbacks=precision_fallbacks(dtypes, precision))

        def load(path: Path, meta: dict[str, Any]) -> Imported:
            with np.load(path / "reference.npz") as ref:
                return Imported(load_imported(path / "relax"), ref["inputs"], ref["outputs"],
                                ref["fp32_outputs"], meta)

        return self._stage("import", keys.import_, compute, load)

    def _compile(self, point: Point, keys: stages.StageKeys) -> tuple[Path, dict[str, Any]]:
        from dlas.compiler.build import compile_model
        from dlas.tuning.base import TuningContext

        import_stage = self._import(point, keys)
        imported = import_stage.model
        target = stages.resolve_target(point)

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            algorithm = point.algorithms.option.fn(point.algorithms.params)
            tuning_ctx = TuningContext(target=target, budgets=point.budgets,
                                       work_dir=self.workspace.root / "tuning",
                                       progress=self.progress, say=self.console.note)
            hook = point.tuning.option.fn(point.tuning.params, tuning_ctx)
            activity = "tuning and compiling" if hook is not None else "compiling"
            with self.console.activity(f"{activity} with {point.algorithms.label}"):
                result = compile_model(imported, algorithm, target.tvm_target, tmp,
                                       schedule_hook=hook)
            tuning = hook.report.summary() if hasattr(hook, "report") else None
            meta["tuning_s"] = tuning["seconds"] if tuning else 0.0
            meta["tuning"] = tuning
            meta.update(
                executable=result.executable_path.name,
                fallbacks=result.fallbacks,
                schedule_warnings=result.schedule_warnings,
                conv_count=result.conv_count,
                compile_s=result.compile_seconds - meta["tuning_s"],  # tuning apart
                tvm_target=target.tvm_target,
                # where a point's compile time goes; import is its stage's (shared by the
                # point's variants: torch.export, Relax frontend, reference outputs)
                phases={"import": import_stage.meta.get("seconds"), **result.phases},
                folded=result.folded,
            )

        def load(path: Path, meta: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
            return path / meta["executable"], meta

        return self._stage("compile", keys.compile, compute, load)

    def _measure(self, point: Point, keys: stages.StageKeys) -> dict[str, Any]:
        """Verify the compiled module, time it, and for reduced precision measure its
        test accuracy (the compiled module is the only place that number exists)."""
        from dlas.measure.sampling import NoisePolicy, collect_samples
        from dlas.measure.session import Session, open_session
        from dlas.measure.timing import run_batch, time_vm
        from dlas.measure.verify import verify_outputs

        imported = self._import(point, keys)
        executable, _ = self._compile(point, keys)
        _, train_meta = self._train(point, keys)
        b = point.budgets
        precision = imported.meta["precision"]

        target = stages.resolve_target(point)

        def compute(_tmp: Path, meta: dict[str, Any]) -> None:
            # this process's CPU or GPU, or a board over RPC (dlas.measure.session)
            with open_session(target) as session:
                measure(session, meta)

        def measure(session: Session, meta: dict[str, Any]) -> None:
            vm = session.load(executable)
            dev = session.device
            threads = session.set_threads(target.num_threads)
            if threads:
                meta["threads"] = threads
            got = run_batch(vm, imported.inputs, device=dev)
            verification = verify_outputs(got, imported.outputs, dtype=precision,
                                          reference=imported.meta["reference"],
                                          output_step=imported.meta.get("output_step"))
            meta["verification"] = verification.as_dict()
            fp32 = verify_outputs(got, imported.fp32_outputs, dtype=precision,
                                  output_step=imported.meta.get("output_step"))
            meta["fp32_agreement"] = {"max_abs_diff": fp32.max_abs_diff,
                                      "top1_agreement": fp32.top1_agreement}
            if not verification.passed:
                meta["error"] = verification.explain()
                return  # a variant computing another function is not timed
            if precision != "float32" and train_meta["accuracy"] is not None:
                bundle = self._data(point, keys)
                with self.console.activity("accuracy of the compiled model"):
                    meta["accuracy"] = _vm_accuracy(vm, bundle.test, device=dev)
            x = imported.inputs[:1]
            with self.console.measuring(b.measure_repeat) as advance:
                sampled = collect_samples(
                    lambda n, warm: time_vm(vm, x, repeat=n, number=b.measure_number,
                                            warmup=warm, device=dev),
                    b.measure_repeat, warmup=b.warmup, probe=session.load_probe(),
                    policy=NoisePolicy.from_budgets(b, retake_on_cv=session.retake_on_cv),
                    advance=advance, say=self.console.note)
            meta["samples_ms"] = sampled.samples_ms
            meta["noise"] = sampled.record()

        return self._stage("measure", keys.measure, compute, lambda p, m: m)

    def _baseline(self, point: Point, keys: stages.StageKeys) -> dict[str, Any]:
        """A baseline point's one stage after import: the compressed model in the baseline
        runtime (PyTorch, ONNX Runtime), verified against the same reference outputs as the
        TVM variants, its accuracy where it computes in reduced precision, and its timing
        by the TVM path's method. A runtime that cannot run the model says why."""
        from dlas.measure.sampling import CpuLoadProbe, NoisePolicy, collect_samples
        from dlas.measure.verify import verify_outputs
        from dlas.targets.host import available_cores
        from dlas.tuning.baselines.base import (
            BaselineModel,
            BaselineNotRunnable,
            peer_accuracy,
            time_peer,
        )

        bundle = self._data(point, keys)
        _, train_meta = self._train(point, keys)
        compressed = self._compress(point, keys)
        imported = self._import(point, keys)
        b = point.budgets
        precision = imported.meta["precision"]
        threads = stages.resolve_target(point).num_threads or available_cores()
        onnx = (compressed.meta.get("deployment") or {}).get("onnx")

        def compute(tmp: Path, meta: dict[str, Any]) -> None:
            model = BaselineModel(
                compressed.model, precision, tuple(bundle.input_shape), threads,
                quantized_onnx=(compressed.path / onnx).read_bytes() if onnx else None,
                work_dir=tmp, info=compressed.meta.get("info") or {})
            try:
                with self.console.activity(f"loading the model in {point.tuning.label}"):
                    peer = point.tuning.option.fn(point.tuning.params, model)
            except BaselineNotRunnable as exc:
                meta["not_runnable"] = str(exc)
                return
            try:
                meta.update(runtime_info=peer.info(), threads=peer.threads)
                got = peer.run_batch1(imported.inputs)
                step = imported.meta.get("output_step")
                verification = verify_outputs(got, imported.outputs, dtype=precision,
                                              reference=imported.meta["reference"],
                                              output_step=step)
                meta["verification"] = verification.as_dict()
                fp32 = verify_outputs(got, imported.fp32_outputs, dtype=precision,
                                      output_step=step)
                meta["fp32_agreement"] = {"max_abs_diff": fp32.max_abs_diff,
                                          "top1_agreement": fp32.top1_agreement}
                if not verification.passed:
                    meta["error"] = f"{peer.runtime}: {verification.explain()}"
                    hint = peer.mismatch_hint()
                    if hint:
                        meta["error"] += f"; {hint}"
                    return  # a peer computing another function is not timed
                if precision != "float32" and train_meta["accuracy"] is not None:
                    # the runtime's own accuracy, measured as it runs the model
                    with self.console.activity(f"accuracy in {peer.runtime}"):
                        meta["accuracy"] = peer_accuracy(peer, bundle.test)
                call = peer.bind(imported.inputs[:1])
                with self.console.measuring(b.measure_repeat) as advance:
                    sampled = collect_samples(
                        lambda n, warm: time_peer(call, repeat=n, number=b.measure_number,
                                                  warmup=warm),
                        b.measure_repeat, warmup=b.warmup, probe=CpuLoadProbe(peer.threads),
                        policy=NoisePolicy.from_budgets(b, retake_on_cv=False),
                        advance=advance, say=self.console.note)
                meta["samples_ms"] = sampled.samples_ms
                meta["noise"] = sampled.record()
            finally:
                peer.close()

        return self._stage("baseline", keys.baseline, compute, lambda p, m: m)

    def _baseline_row(self, point: Point, keys: stages.StageKeys,
                      row: dict[str, Any]) -> dict[str, Any]:
        """The result row of a baseline point: the TVM row's columns, filled from the
        baseline stage (no compile or tuning time; `runtime_info` says what ran)."""
        before = dict(self.report.seconds)
        try:
            _, train_meta = self._train(point, keys)
            comp_meta = self._compress(point, keys).meta
            measured = self._baseline(point, keys)
        except StageFailed as failure:
            row.update(status="failed", error_stage=failure.stage,
                       error=f"{type(failure.error).__name__}: {failure.error}",
                       traceback=failure.tb)
            return row
        finally:
            row["stage_seconds"] = {s: self.report.seconds[s] - before.get(s, 0.0)
                                    for s in stages.STAGES}
        if "not_runnable" in measured:
            row.update(status="not_runnable", error_stage="baseline",
                       error=f"tuning '{point.tuning.name}': {measured['not_runnable']}")
            return row
        verification = measured["verification"]
        row.update(_measured_columns(comp_meta, train_meta, measured, point.tuning.name),
                   runtime_info=measured.get("runtime_info"))
        if not verification["passed"]:
            row.update(status="verification_failed", error_stage="baseline",
                       error=measured["error"])
            return row
        row.update(status="ok", **latency_columns(measured["samples_ms"],
                                                  point.budgets.cv_threshold,
                                                  measured.get("noise")))
        return row

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
        if point.is_baseline:
            return self._baseline_row(point, keys, row)
        before = dict(self.report.seconds)
        try:
            _, train_meta = self._train(point, keys)
            comp_meta = self._compress(point, keys).meta
            import_meta = self._import(point, keys).meta
            _, compile_meta = self._compile(point, keys)
            unmeasurable = stages.resolve_target(point).unmeasurable
            if unmeasurable:  # compiled and cached; nothing here can run it
                row.update(status="not_runnable", error_stage="measure", error=unmeasurable,
                           compile_s=compile_meta["compile_s"],
                           compile_phases=compile_meta.get("phases"),
                           tuning_s=compile_meta["tuning_s"], **_tuning_columns(compile_meta))
                return row
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
            _measured_columns(comp_meta, train_meta, measured, "tvm"),
            compile_s=compile_meta["compile_s"], tuning_s=compile_meta["tuning_s"],
            compile_phases=compile_meta.get("phases"),
            **_tuning_columns(compile_meta),
            conv_fallbacks=import_meta["precision_fallbacks"] + compile_meta["fallbacks"],
        )
        if not verification["passed"]:
            row.update(status="verification_failed", error_stage="measure",
                       error=measured["error"])
            return row
        row.update(status="ok", **latency_columns(measured["samples_ms"],
                                                  point.budgets.cv_threshold,
                                                  measured.get("noise")))
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


#: File name of an int8 model's quantized ONNX in its compress-stage entry.
QUANTIZED_ONNX = "model_int8.onnx"


@dataclass
class Compressed:
    """A compress-stage entry: the PyTorch model, its facts, and where its files are."""

    model: Any
    meta: dict[str, Any]
    path: Path


@dataclass
class Imported:
    """An import-stage entry: the Relax model and the outputs its compiled form must give."""

    model: Any
    inputs: np.ndarray
    #: What the compiled model must compute (PyTorch's, or the int8 QDQ model's literal
    #: function).
    outputs: np.ndarray
    #: The float32 PyTorch model's outputs on the same inputs.
    fp32_outputs: np.ndarray
    meta: dict[str, Any]


#: Data dtypes a conv of a model deployed in each precision is expected to read.
_CONV_DATA_DTYPES = {"float32": {"float32"}, "float16": {"float16"}, "int8": {"int8", "uint8"}}


def precision_fallbacks(dtypes: list[tuple[str, str, str]], precision: str) -> list[str]:
    """One note per conv that does not compute in the deployed precision (e.g. a conv of
    an int8 model that stayed a float conv), recorded beside the algorithm fallbacks."""
    expected = _CONV_DATA_DTYPES[precision]
    return [f"conv {i} (data, weight, out) = {d}: not {precision}; runs in {d[0]}"
            for i, d in enumerate(dtypes) if d[0] not in expected]


def _measured_columns(comp_meta: dict[str, Any], train_meta: dict[str, Any],
                      measured: dict[str, Any], runtime: str) -> dict[str, Any]:
    """The row columns every measured point has, TVM variant or baseline: the model's
    facts, its accuracy and the verification of what `runtime` computed.

    float32: PyTorch computes what the runtime does (verified), so its accuracy stands;
    reduced precision: only the deployed runtime computes that function, so the
    accuracy is the one measured there.
    """
    precision = comp_meta["precision"]
    accuracy, source = comp_meta["accuracy"], "pytorch"
    if precision != "float32":
        accuracy, source = measured.get("accuracy"), runtime
    verification = measured["verification"]
    fp32 = measured.get("fp32_agreement", {})
    return dict(
        accuracy=accuracy,
        accuracy_source=source if accuracy is not None else None,
        ort_accuracy=comp_meta.get("ort_accuracy"),
        dense_accuracy=train_meta["accuracy"],
        precision=precision,
        compression_ratio=_ratio(comp_meta["info"]),
        params=comp_meta["params"], nonzero_params=comp_meta["nonzero_params"],
        macs=comp_meta["macs"], sparsity=comp_meta["sparsity"],
        size_bytes=comp_meta["size_bytes"],
        train_history=train_meta.get("history"),
        compression_info=comp_meta["info"],
        threads=measured.get("threads"),
        verified=int(verification["passed"]),
        verification_reference=verification.get("reference", "pytorch"),
        max_abs_diff=verification["max_abs_diff"],
        top1_agreement=verification["top1_agreement"],
        fp32_max_abs_diff=fp32.get("max_abs_diff"),
        fp32_top1_agreement=fp32.get("top1_agreement"),
    )


def _tuning_columns(compile_meta: dict[str, Any]) -> dict[str, Any]:
    """What tuning did for a point: trials measured, tasks tuned vs reused from the
    target's database, and the per-task report."""
    tuning = compile_meta.get("tuning")
    if not tuning:
        return {}
    return {"tuning_trials": tuning["trials"], "tasks_tuned": tuning["tuned"],
            "tasks_reused": tuning["reused"], "tuning_report": tuning}


def _ratio(info: dict[str, Any]) -> float | None:
    value = info.get("compression_ratio")
    return None if value is None else float(value)


def _float16_size(model: Any) -> int:
    """Bytes of the model saved with float16 weights (what a float16 deployment stores)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(copy.deepcopy(model).half().state_dict(), buffer)
    return buffer.getbuffer().nbytes


def _vm_accuracy(vm: Any, dataset: Any, batch_size: int = 256, device: Any = None) -> float:
    """Top-1 accuracy of a compiled (batch-1) module over a dataset."""
    import torch
    from torch.utils.data import DataLoader

    from dlas.measure.timing import run_batch

    correct = seen = 0
    for x, y in DataLoader(dataset, batch_size=batch_size, num_workers=0):
        logits = run_batch(vm, x.numpy(), device=device)
        correct += int((logits.argmax(axis=1) == torch.as_tensor(y).numpy()).sum())
        seen += len(y)
    if seen == 0:
        raise ValueError("cannot evaluate on an empty dataset")
    return correct / seen


def _check_verify_samples(bundle: Any, verify_samples: int) -> None:
    """Fail at the data stage, before any training, when the test split is too small for
    the verification inputs (it would fail only at import, after training)."""
    size = len(bundle.test)
    if verify_samples > size:
        raise ValueError(f"budgets.verify_samples is {verify_samples}, but dataset "
                         f"'{bundle.name}' has only {size} test images: set "
                         f"budgets.verify_samples to at most {size}")


class MissingSplit:
    """Stands in for a training split a dataset does not have: any use says so."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __len__(self) -> int:
        raise RuntimeError(self.message)

    def __getitem__(self, index: int) -> Any:
        raise RuntimeError(self.message)


def _with_train_split_check(bundle: Any, point: Point) -> Any:
    """The bundle, or for a dataset without training images one whose `train` raises a
    clear error when a compression tries to fine-tune or calibrate on it."""
    import dataclasses

    train = bundle.train
    try:
        missing = train is None or len(train) == 0
    except Exception:  # a split that raises its own error on use explains itself
        missing = False
    if not missing:
        return bundle
    message = (f"dataset '{bundle.name}' has no training split: compression "
               f"'{point.compression.name}' cannot fine-tune (or calibrate) the model "
               f"'{point.models.name}' on it; set budgets.finetune_epochs: 0, or use a "
               "dataset with training images")
    return dataclasses.replace(bundle, train=MissingSplit(message))


_LAYER_COLUMNS = {"dataset": "datasets", "model": "models", "compression": "compression",
                  "algorithm": "algorithms", "tuning": "tuning", "target": "targets"}
