"""Baselines on the systems-software layer: PyTorch eager and ONNX Runtime measured in the
same sweep as the TVM variants, once per model/compression/target, verified and timed the
same way; combinations they cannot run are recorded with the reason."""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest

from dlas import registry
from dlas.registry import BASELINE_TAG
from dlas.report.tables import baseline_comparison, speed_cells
from dlas.results.store import ResultStore
from dlas.runner.cache import Cache
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.stages import stage_keys
from dlas.stages.compress import QUANTIZED_ONNX
from dlas.sweep.config import parse_config
from dlas.sweep.grid import expand
from dlas.targets.base import TargetSpec
from dlas.targets.options import NO_GPU
from dlas.tuning.baselines.base import BaselineModel, BaselineNotRunnable, Peer
from dlas.tuning.baselines.ort import ONNX_FILE
from tests.conftest import tiny_sweep
from tests.test_report import make_db, point_from_row, row


def sweep(compression: list[str] | None = None, algorithms: list[str] | None = None,
          tuning: str = "[none, pytorch, onnxruntime]", threads: int | None = 1) -> str:
    text = tiny_sweep(compression=compression, algorithms=algorithms)
    text = text.replace("tuning: [none]", f"tuning: {tuning}")
    if threads:
        text = text.replace("targets: [host]",
                            f"targets:\n  - name: host\n    params: {{threads: {threads}}}")
    return text


def run(text: str, root: Path, cache: Path | None = None) -> RunReport:
    return Runner(Workspace(root, cache), progress=False).run(parse_config(text))


def rows(root: Path) -> list[dict]:
    with ResultStore(root / "results.db") as store:
        return store.rows()


# -- the grid ---------------------------------------------------------------------------------


def test_the_algorithm_axis_collapses_for_a_baseline() -> None:
    algorithms = ["direct", "gemm", "spatial_pack"]
    points = expand(parse_config(sweep(algorithms=algorithms, tuning="[none, onnxruntime]")))
    tvm = [p for p in points if not p.is_baseline]
    (ort,) = [p for p in points if p.is_baseline]  # one, not one per algorithm
    assert [p.algorithms.name for p in tvm] == algorithms
    assert ort.labels()["algorithms"] == ort.labels()["tuning"] == "onnxruntime"
    assert BASELINE_TAG in ort.algorithms.tags and ort.blocked is None
    assert [p.index for p in points] == list(range(len(points)))
    # neither the point nor its stages depend on which algorithms the sweep lists
    (alone,) = [p for p in expand(parse_config(sweep(tuning="[onnxruntime]")))]
    assert alone.key == ort.key and stage_keys(alone) == stage_keys(ort)
    keys = stage_keys(ort)
    assert keys.baseline and not keys.compile and not keys.measure
    assert [s for s, _ in keys.items()] == ["data", "train", "compress", "import", "baseline"]
    assert "baseline" not in dict(stage_keys(tvm[0]).items())
    # the baseline key follows what it measures: threads and the runtime's parameters
    two = next(p for p in expand(parse_config(sweep(tuning="[onnxruntime]", threads=2))))
    assert stage_keys(two).baseline != keys.baseline
    assert stage_keys(two).import_ == keys.import_
    basic = sweep(tuning="[{name: onnxruntime, params: {graph_optimization: basic}}]")
    assert stage_keys(expand(parse_config(basic))[0]).baseline != keys.baseline


@pytest.fixture
def foreign_targets():
    """GPU targets (one absent, one present) and a CPU of another architecture."""
    other = "x86_64" if platform.machine() in ("aarch64", "arm64") else "aarch64"

    @registry.register("targets", "test_gpu", description="a CUDA target, no GPU (test)")
    def gpu(params):
        return TargetSpec(name="test_gpu", tvm_target={"kind": "cuda", "arch": "sm_90"},
                          device="cuda", unmeasurable=NO_GPU)

    @registry.register("targets", "test_gpu_here", description="a CUDA GPU here (test)")
    def gpu_here(params):
        return TargetSpec(name="test_gpu_here", device="cuda",
                          tvm_target={"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}})

    @registry.register("targets", "test_other_cpu", description="another CPU arch (test)")
    def other_cpu(params):
        return TargetSpec(name="test_other_cpu", device="cpu", num_threads=1,
                          tvm_target={"kind": "llvm", "mtriple": f"{other}-linux-gnu"})

    yield ["test_gpu", "test_gpu_here", "test_other_cpu"]
    registry.unregister("targets", "test_gpu")
    registry.unregister("targets", "test_gpu_here")
    registry.unregister("targets", "test_other_cpu")


def test_combinations_a_baseline_cannot_run_are_not_runnable_with_the_reason(
        foreign_targets: list[str]) -> None:
    text = sweep(compression=["none", "int8"], tuning="[pytorch, onnxruntime]").replace(
        "targets:\n  - name: host\n    params: {threads: 1}",
        "targets: [host, " + ", ".join(foreign_targets) + "]")
    blocked = {(p.compression.name, p.tuning.name, p.targets.name): p.blocked
               for p in expand(parse_config(text))}
    assert blocked[("none", "pytorch", "host")] is None
    assert blocked[("int8", "onnxruntime", "host")] is None
    assert "cannot run the int8 QDQ model" in blocked[("int8", "pytorch", "host")]
    for runtime in ("pytorch", "onnxruntime"):
        assert "this machine is" in blocked[("none", runtime, "test_other_cpu")]
    # ONNX Runtime (its CPU execution provider) never runs on a GPU target...
    for gpu in ("test_gpu", "test_gpu_here"):
        assert "runs on cuda" in blocked[("none", "onnxruntime", gpu)]
        assert "local CPU" in blocked[("none", "onnxruntime", gpu)]
    # ...PyTorch runs on this machine's GPU, and says so where there is none
    assert blocked[("none", "pytorch", "test_gpu_here")] is None
    assert NO_GPU in blocked[("none", "pytorch", "test_gpu")]


# -- end to end -------------------------------------------------------------------------------


def test_baselines_recorded_verified_timed_once_each_then_reused(tmp_path: Path) -> None:
    import torch

    threads_before = torch.get_num_threads()
    text = sweep(algorithms=["direct", "gemm"])
    first = run(text, tmp_path)
    assert (first.points, first.ok, first.failed) == (4, 4, 0)
    assert first.computed["baseline"] == 2 and first.computed["compile"] == 2
    assert first.computed["import"] == 1  # one reference for TVM variants and baselines
    assert torch.get_num_threads() == threads_before  # PyTorch's setting was restored

    recorded = rows(tmp_path)
    by_tuning: dict[str, list[dict]] = {}
    for r in recorded:
        by_tuning.setdefault(r.tuning, []).append(r)
    assert len(by_tuning["none"]) == 2
    (pt,) = by_tuning["pytorch"]  # exactly one row per baseline, not per algorithm
    (ort,) = by_tuning["onnxruntime"]
    tvm = by_tuning["none"][0]
    for r, runtime in ((pt, "pytorch"), (ort, "onnxruntime")):
        assert r.status == "ok" and r.verified == 1, r.error
        assert r.algorithm == runtime
        assert r.verification_reference == "pytorch" and r.max_abs_diff < 1e-3
        assert r.top1_agreement == 1.0
        assert r.threads == 1 and r.runtime_info["threads"] == 1
        assert r.runtime_info["runtime"] == runtime and r.runtime_info["version"]
        assert len(r.latency_samples_ms) >= 5  # rounds x ceil(repeat / rounds)
        assert 0 < r.latency_min_ms <= r.latency_median_ms <= r.latency_max_ms
        assert r.latency_median_ms == pytest.approx(np.median(r.latency_samples_ms))
        assert r.latency_cv == pytest.approx(
            np.std(r.latency_samples_ms) / np.mean(r.latency_samples_ms))
        assert r.noisy in (0, 1)
        assert r.accuracy == tvm.accuracy and r.accuracy_source == "pytorch"
        assert r.compile_s is None and r.conv_fallbacks is None
        assert r.stage_seconds["baseline"] >= 0
    assert ort.runtime_info["inter_op_threads"] == 1
    assert ort.runtime_info["execution_mode"] == "sequential"
    assert ort.runtime_info["providers"] == ["CPUExecutionProvider"]
    assert ort.runtime_info["model"].startswith("float32 ONNX export")
    assert pt.runtime_info["dtype"] == "float32"

    second = run(text, tmp_path)
    assert second.ok == 4 and second.recomputed_nothing
    assert second.reused["baseline"] == 2 and second.computed["baseline"] == 0
    assert len(rows(tmp_path)) == 4

    # the report compares every TVM variant with both baselines, and keeps them out of
    # the paper's tables
    points = [point_from_row(r) for r in rows(tmp_path)]
    cmp = baseline_comparison(points)
    assert cmp.runtimes == ["onnxruntime", "pytorch"] and len(cmp.rows) == 2
    for r in cmp.rows:
        assert r.ratio("onnxruntime") == pytest.approx(
            r.variant.latency_ms / ort.latency_median_ms)
    cells = next(iter(next(iter(speed_cells(points).values())).values()))
    assert {alg for _, alg in cells} == {"direct", "gemm"}


def test_int8_onnxruntime_baseline_runs_the_quantized_model(tmp_path: Path) -> None:
    report = run(sweep(compression=["int8"], tuning="[pytorch, onnxruntime]"), tmp_path)
    assert (report.ok, report.not_runnable, report.failed) == (1, 1, 0)
    assert report.computed["compile"] == 0  # no TVM variant in this sweep
    by_tuning = {r.tuning: r for r in rows(tmp_path)}
    ort, pt = by_tuning["onnxruntime"], by_tuning["pytorch"]
    assert ort.status == "ok" and ort.verified == 1 and ort.precision == "int8"
    assert ort.verification_reference == "qdq"  # the literal QDQ function
    assert ort.runtime_info["model"] == "int8 QDQ model from the compress stage"
    assert ort.accuracy == ort.ort_accuracy and ort.accuracy_source == "onnxruntime"
    # the very bytes the compress stage quantized
    point = next(p for p in expand(parse_config(
        sweep(compression=["int8"], tuning="[onnxruntime]"))))
    keys, cache = stage_keys(point), Cache(tmp_path / "cache")
    assert (cache.path("baseline", keys.baseline) / ONNX_FILE).read_bytes() == (
        cache.path("compress", keys.compress) / QUANTIZED_ONNX).read_bytes()
    assert pt.status == "not_runnable" and "int8 QDQ" in pt.error


@pytest.fixture
def odd_baselines():
    """A baseline that computes the wrong function, and one that finds it cannot run."""

    class Negated(Peer):
        runtime = "test_wrong_peer"

        def __init__(self, model: BaselineModel) -> None:
            self.module, self.threads = model.model, model.threads

        def run(self, inputs: np.ndarray) -> np.ndarray:
            import torch

            with torch.no_grad():
                return -self.module(torch.from_numpy(inputs)).numpy()

        def bind(self, x: np.ndarray):  # noqa: ANN201
            return lambda: self.run(x)

    @registry.register("tuning", "test_wrong_peer", tags={BASELINE_TAG},
                       description="negates the logits (test)")
    def wrong(params, model):
        return Negated(model)

    @registry.register("tuning", "test_unable_peer", tags={BASELINE_TAG},
                       description="cannot run anything (test)")
    def unable(params, model):
        raise BaselineNotRunnable("this runtime has no kernels at all")

    yield ["test_wrong_peer", "test_unable_peer"]
    registry.unregister("tuning", "test_wrong_peer")
    registry.unregister("tuning", "test_unable_peer")


def test_a_wrong_peer_fails_verification_and_an_unable_one_says_why(
        tmp_path: Path, shared_cache: Path, odd_baselines: list[str]) -> None:
    report = run(sweep(tuning=f"[{', '.join(odd_baselines)}]"), tmp_path, shared_cache)
    assert (report.verification_failed, report.not_runnable) == (1, 1)
    by_tuning = {r.tuning: r for r in rows(tmp_path)}
    wrong, unable = by_tuning["test_wrong_peer"], by_tuning["test_unable_peer"]
    assert wrong.status == "verification_failed" and wrong.verified == 0
    assert "test_wrong_peer" in wrong.error and "differs from PyTorch" in wrong.error
    assert wrong.latency_median_ms is None  # a wrong peer is never reported as a time
    assert unable.status == "not_runnable" and unable.error_stage == "baseline"
    assert "no kernels at all" in unable.error
    again = run(sweep(tuning=f"[{', '.join(odd_baselines)}]"), tmp_path, shared_cache)
    assert again.computed["baseline"] == 0 and again.not_runnable == 1


@pytest.fixture
def crashing_baseline():  # noqa: ANN201
    class Crashing(Peer):
        """Computes the right function, then kills its process when timed."""

        runtime = "test_crashing_peer"

        def __init__(self, model: BaselineModel) -> None:
            self.module, self.threads = model.model, model.threads

        def run(self, inputs: np.ndarray) -> np.ndarray:
            import torch

            with torch.no_grad():
                return self.module(torch.from_numpy(inputs)).numpy()

        def bind(self, x: np.ndarray):  # noqa: ANN201
            def crash() -> None:
                import os
                import signal

                os.kill(os.getpid(), signal.SIGSEGV)

            return crash

    @registry.register("tuning", "test_crashing_peer", tags={BASELINE_TAG},
                       description="crashes the process that times it (test)")
    def crashing(params, model):
        return Crashing(model)

    yield "test_crashing_peer"
    registry.unregister("tuning", "test_crashing_peer")


def test_a_variant_that_crashes_the_timing_worker_fails_alone(
        tmp_path: Path, shared_cache: Path, crashing_baseline: str,
        capsys: pytest.CaptureFixture) -> None:
    """The worker dies while timing the crashing runtime: that point fails with what
    happened, and its model's other variants are timed again without it."""
    report = run(sweep(tuning=f"[none, {crashing_baseline}]"), tmp_path, shared_cache)
    assert (report.ok, report.failed) == (1, 1)
    by_tuning = {r.tuning: r for r in rows(tmp_path)}
    crashed, tvm = by_tuning[crashing_baseline], by_tuning["none"]
    assert crashed.error_stage == "baseline"
    assert "timing worker died (signal 11) while running" in crashed.error
    assert crashing_baseline in crashed.error
    assert tvm.status == "ok" and tvm.latency_median_ms > 0
    assert "timing the other variants again without it" in capsys.readouterr().out


# -- the report -------------------------------------------------------------------------------


def baseline_row(runtime: str, ms: float, **kw) -> dict:
    r = row(algorithm=runtime, tuning=runtime, ms=ms, **kw)
    r["config"]["choices"]["algorithms"]["version"] = "baseline"
    return r


def test_report_puts_tvm_variants_beside_the_baselines(tmp_path: Path) -> None:
    from dlas.report import build_report

    db = make_db(tmp_path / "r.db", [
        row(algorithm="direct", ms=12.0), row(algorithm="gemm", ms=6.0),
        row(algorithm="gemm", ms=3.0, tuning="metaschedule"),
        row(algorithm="gemm", compression="int8", ms=5.0),
        baseline_row("onnxruntime", 4.0), baseline_row("pytorch", 24.0),
        baseline_row("onnxruntime", 2.5, compression="int8", latency_cv=0.2, noisy=1),
    ])
    from dlas.report.data import load_points

    points = load_points(db)
    assert sum(p.is_baseline_result for p in points) == 3
    assert not any(p.is_result for p in points if p.baseline)
    cmp = baseline_comparison(points)
    ratios = {(r.variant.compression, r.variant.algorithm, r.variant.tuning):
              (r.ratio("onnxruntime"), r.ratio("pytorch")) for r in cmp.rows}
    assert ratios == {("none", "direct", "none"): (3.0, 0.5),
                      ("none", "gemm", "none"): (1.5, 0.25),
                      ("none", "gemm", "metaschedule"): (0.75, 0.125),
                      ("int8", "gemm", "none"): (2.0, None)}
    # the paper's tables see the TVM variants only
    groups = speed_cells(points)
    assert {g.tuning for g in groups} == {"none", "metaschedule"}
    files = build_report(db, tmp_path / "out")
    text = files.markdown.read_text()
    assert "## TVM against ONNX Runtime and PyTorch" in text
    assert "| 1.50x slower | 4.00x faster |" in text
    assert "noisy, cv 20%" in text and "1 timed points are flagged noisy" in text


@pytest.fixture
def export_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The input shapes `export_onnx` is called with from now on (it still exports)."""
    import torch

    from dlas.compression import int8

    calls: list[tuple[int, ...]] = []
    real = int8.export_onnx

    def counted(model: torch.nn.Module, shape: tuple[int, ...]) -> bytes:
        calls.append(shape)
        return real(model, shape)

    monkeypatch.setattr(int8, "export_onnx", counted)
    return calls


def test_the_float32_export_is_kept_and_read_back(tmp_path: Path,
                                                  export_calls: list) -> None:
    """ONNX Runtime's export is done once per compressed model, not per timing run."""
    import torch

    from dlas.compression import int8

    calls = export_calls
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    memo = tmp_path / "exports" / "key-torch.onnx"
    first = int8.export_onnx_memo(model, (3, 8, 8), memo)
    again = int8.export_onnx_memo(model, (3, 8, 8), memo)
    assert first == again == memo.read_bytes() and len(calls) == 1
    assert sorted(p.name for p in memo.parent.iterdir()) == [memo.name]  # no partial file
    int8.export_onnx_memo(model, (3, 8, 8), None)  # no memo: exported again
    assert len(calls) == 2


@pytest.mark.parametrize("damage", ["cut short", "overwritten", "emptied"])
def test_a_damaged_export_memo_is_exported_again_and_replaced(
        tmp_path: Path, export_calls: list, damage: str) -> None:
    """A memo damaged on disk (a full disk, a stray write) costs one export, not the
    ONNX Runtime point: it is exported again, and the file replaced by a whole one."""
    import torch

    from dlas.compression import int8

    calls = export_calls
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    memo = tmp_path / "key-torch.onnx"
    whole = int8.export_onnx_memo(model, (3, 8, 8), memo)
    memo.write_bytes({"cut short": whole[: len(whole) * 2 // 3],
                      "overwritten": b"\x00not an onnx model" * 10,
                      "emptied": b""}[damage])
    assert int8.export_onnx_memo(model, (3, 8, 8), memo) == whole and len(calls) == 2
    assert memo.read_bytes() == whole
    assert int8.export_onnx_memo(model, (3, 8, 8), memo) == whole and len(calls) == 2


def test_the_export_is_named_by_what_it_depends_on(tmp_path: Path) -> None:
    import torch

    from dlas.compression.int8 import export_memo

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    same = export_memo(tmp_path, model, (3, 8, 8))
    assert same == export_memo(tmp_path, model, (3, 8, 8)) and same.parent.parent == tmp_path
    assert export_memo(tmp_path, model, (3, 16, 16)) != same  # another input shape
    with torch.no_grad():
        model[0].weight[0, 0, 0, 0] += 1.0
    assert export_memo(tmp_path, model, (3, 8, 8)) != same  # other weights
    assert export_memo(None, model, (3, 8, 8)) is None


def test_the_export_names_its_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memo written under another export rule (the dynamo exporter alone, before) is
    not served for this one."""
    import torch

    from dlas.compression import int8

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)).eval()
    now = int8.export_memo(tmp_path, model, (3, 8, 8))
    monkeypatch.setattr(int8, "EXPORT_RULE", "dynamo")
    assert int8.export_memo(tmp_path, model, (3, 8, 8)) != now


@pytest.mark.parametrize("torchscript", ["works", "fails", "traces another function"])
def test_the_export_is_torchscripts_else_dynamos_and_says_which(
        monkeypatch: pytest.MonkeyPatch, torchscript: str) -> None:
    """The TorchScript exporter makes the model (0.2 s where dynamo's takes about 4 on a
    quickstart model); where it fails, or its trace computes another function than the
    module (Python control flow recorded for the example it traced), the dynamo exporter
    does. Either export computes the module's function in ONNX Runtime with a dynamic
    batch, and says which exporter made it; the baseline's row says so too."""
    import torch

    from dlas.compression import int8
    from dlas.tuning.baselines.ort import onnx_model

    real = int8._export_torchscript
    if torchscript == "fails":
        def broken(model: torch.nn.Module, example: torch.Tensor) -> bytes:
            raise RuntimeError("an exporter that cannot take this model")

        monkeypatch.setattr(int8, "_export_torchscript", broken)
    elif torchscript == "traces another function":
        def traced(model: torch.nn.Module, example: torch.Tensor) -> bytes:
            other = torch.nn.Sequential(*list(model.children())[:-1],
                                        torch.nn.Linear(4, 10)).eval()
            return real(other, example)  # the same graph, other weights: another function

        monkeypatch.setattr(int8, "_export_torchscript", traced)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(4, 10)).eval()
    data = int8.export_onnx(model, (3, 8, 8))
    expected = "torchscript" if torchscript == "works" else "dynamo"
    assert int8.exporter_of(data) == expected
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    with torch.no_grad():
        reference = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(session.run(None, {int8.INPUT_NAME: x})[0], reference,
                               rtol=1e-5, atol=1e-5)
    _, source = onnx_model(BaselineModel(model, "float32", (3, 8, 8), threads=1))
    assert source == f"float32 ONNX export of the compressed model ({expected} exporter)"


def test_pytorch_on_a_gpu_needs_a_cuda_torch_and_leaves_the_shared_module_alone() -> None:
    """A cuda point's PyTorch peer works on a copy of the module on the GPU (the module is
    shared with other points); a torch with no CUDA GPU says so instead of failing."""
    import torch

    from dlas.tuning.baselines.torch_eager import TorchPeer

    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten())
    model = BaselineModel(module, "float32", (1, 8, 8), threads=1, device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(BaselineNotRunnable, match="no CUDA GPU"):
            TorchPeer(model)
        return
    peer = TorchPeer(model)
    try:
        assert next(module.parameters()).device.type == "cpu"  # the shared one untouched
        assert next(peer.module.parameters()).device.type == "cuda"
        x = np.ones((1, 1, 8, 8), dtype=np.float32)
        expected = module(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(peer.run(x), expected, rtol=1e-4, atol=1e-4)
        peer.bind(x)()
        assert peer.info()["device"] == torch.cuda.get_device_name(0)
    finally:
        peer.close()


# -- PyTorch's other modes: CUDA-graph replay and torch.compile --------------------------------


def test_pytorch_modes_that_cannot_run_say_why_in_the_plan() -> None:
    text = sweep(tuning="[none, {name: pytorch, params: {mode: cuda_graph}}, "
                 "{name: pytorch, params: {compile_mode: max-autotune}}, "
                 "{name: pytorch, params: {mode: compile, compile_mode: default}}]")
    blocked = {p.tuning.label: p.blocked for p in expand(parse_config(text))
               if p.tuning.name == "pytorch"}
    assert "needs a cuda target" in blocked["pytorch(mode=cuda_graph)"]
    assert "set mode: compile" in blocked["pytorch(compile_mode=max-autotune)"]
    assert blocked["pytorch(compile_mode=default,mode=compile)"] is None


def test_a_cuda_graph_peer_needs_a_gpu_and_tf32_is_restored() -> None:
    import torch

    from dlas.tuning.baselines.torch_eager import TorchPeer
    from dlas.tuning.baselines.torch_graph import TorchGraphPeer

    module = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten())
    with pytest.raises(BaselineNotRunnable, match="needs a cuda target"):
        TorchGraphPeer(BaselineModel(module, "float32", (1, 8, 8), threads=1))
    before = torch.backends.cudnn.allow_tf32
    peer = TorchPeer(BaselineModel(module, "float32", (1, 8, 8), threads=1), tf32=not before)
    assert torch.backends.cudnn.allow_tf32 is (not before)
    assert peer.info()["mode"] == "eager" and peer.info()["gpu_math"] is None  # a CPU
    peer.close()
    assert torch.backends.cudnn.allow_tf32 is before


def test_a_torch_compiled_peer_is_verified_and_timed_in_a_sweep(tmp_path: Path) -> None:
    """torch.compile (TorchInductor's C++ kernels on this CPU) as a sweep's baseline: compiled
    before anything is verified or timed, verified against the reference like every
    row, its mode and compile seconds on the row."""
    import shutil

    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler: TorchInductor's CPU kernels cannot be built here")
    text = sweep(tuning="[{name: pytorch, params: {mode: compile, compile_mode: default}}]")
    report = run(text, tmp_path)
    assert report.failed == 0
    (row,) = rows(tmp_path)
    assert row.status == "ok" and row.verified == 1, row.error
    assert row.tuning == "pytorch(compile_mode=default,mode=compile)"
    assert row.runtime_info["mode"] == "compile"
    assert row.runtime_info["compile_mode"] == "default" and row.runtime_info["compile_s"] > 0


def test_a_baseline_subject_reads_its_input_shape_from_the_import_not_the_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timing worker built the data bundle for a baseline's input shape: for digits,
    scikit-learn's import and the dataset (about 2 s) in every worker of every pass. The
    shape comes from the import's facts; a float32 baseline never asks for the data."""
    from types import SimpleNamespace

    import torch

    from dlas.stages.base import Inputs
    from dlas.stages.baseline import BASELINE
    from dlas.stages.compress import COMPRESS
    from dlas.stages.data import DATA
    from dlas.stages.import_model import IMPORT
    from dlas.stages.timed import TimingContext

    (point,) = expand(parse_config(sweep(tuning="[onnxruntime]")))
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()
    compressed = SimpleNamespace(model=model, quantized_onnx=lambda: None,
                                 facts=SimpleNamespace(info={}))
    imported = SimpleNamespace(facts=SimpleNamespace(precision="float32",
                                                     input_shape=[1, 3, 12, 12]))
    asked: list[str] = []

    def output(stage: object) -> object:
        asked.append(stage.name)  # type: ignore[attr-defined]
        if stage is DATA:
            raise AssertionError("the data bundle was built for a float32 baseline")
        return {COMPRESS.name: compressed, IMPORT.name: imported}[stage.name]  # type: ignore[attr-defined]

    seen: list[tuple[int, ...]] = []
    real = point.tuning.option.fn

    def peer(params: object, baseline: BaselineModel) -> object:
        seen.append(baseline.input_shape)
        return real(params, baseline)

    monkeypatch.setattr(point.tuning.option, "fn", peer)
    subject = BASELINE.subject(point, Inputs(BASELINE, output, lambda s: None),
                               TimingContext(), tmp_path)
    assert seen == [(3, 12, 12)] and DATA.name not in asked
    subject.close()  # type: ignore[union-attr]
