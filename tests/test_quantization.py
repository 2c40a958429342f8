"""float16 and int8 deployment: real ONNX Runtime quantization, real TVM builds.

A small CNN trained for one epoch on digits (about 85% test accuracy in a second), so
accuracies mean something: stride-2 conv + batch-norm, depthwise conv, 1x1 conv with bias,
a residual add, and a linear head.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import tvm
from onnx import numpy_helper
from torch import nn
from tvm import relax, s_tir, tirx

from dlas import registry
from dlas.algorithms.base import ConvAlgorithm, ConvSpec
from dlas.algorithms.direct import DirectConv
from dlas.compiler.build import compile_model, lower_to_tir, make_target
from dlas.compiler.precision import convert_float16
from dlas.compiler.quantized import conv_dtypes, import_qdq_onnx, output_step
from dlas.compiler.relax_import import import_torch_model
from dlas.compression.int8 import (
    OrtModel,
    calibration_inputs,
    choose_reduce_range,
    export_onnx,
    literal_qdq,
    quantize_qdq,
)
from dlas.datasets.base import fixed_batch
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import parse_config
from dlas.targets.host import has_vnni, machine_cpuinfo_fields
from dlas.tir.conv_spec import CONV_ALGORITHM_ATTR, conv_spec_of
from dlas.tir.schedule_helpers import leaf_blocks

INT8 = ("int8", "int8", "int32")
TARGET = {"kind": "llvm"}


class DigitsCNN(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(8), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
                                nn.BatchNorm2d(8), nn.ReLU())
        self.pw = nn.Conv2d(8, 8, 1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(16 * 8 * 8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = x + torch.relu(self.pw(self.dw(x)))
        return self.head(torch.flatten(torch.relu(self.down(x)), 1))


@pytest.fixture(scope="module", autouse=True)
def digits_cnn_option():
    @registry.register("models", "test_digits_cnn", description="test-only CNN, learns fast")
    def digits_cnn(params, num_classes: int, input_shape: tuple[int, ...]) -> nn.Module:
        return DigitsCNN(num_classes)

    yield
    registry.unregister("models", "test_digits_cnn")


@pytest.fixture(scope="module")
def digits():
    from dlas.datasets.digits import load_digits

    return load_digits()


@pytest.fixture(scope="module")
def model(digits) -> nn.Module:
    from dlas.models.seeding import seed_all
    from dlas.models.training import FitSettings, train_model

    seed_all(0)
    net = DigitsCNN()
    train_model(net, digits, 1, settings=FitSettings(batch_size=32, data_fraction=0.5,
                                                     progress=False))
    return net.eval()


@pytest.fixture(scope="module")
def fp32_onnx(model, digits) -> bytes:
    return export_onnx(model, digits.input_shape)


@pytest.fixture(scope="module")
def quantized(fp32_onnx, digits) -> dict[str, bytes]:
    """8-bit weights (what CPUs with VNNI get) and 7-bit ones (`reduce_range`, what CPUs
    without VNNI get), calibrated and not."""
    images, _ = calibration_inputs(digits, 64, seed=0)
    return {"calibrated": quantize_qdq(fp32_onnx, images),
            "uncalibrated": quantize_qdq(fp32_onnx, global_scale=8.0),
            "calibrated_reduce_range": quantize_qdq(fp32_onnx, images, reduce_range=True),
            "uncalibrated_reduce_range": quantize_qdq(fp32_onnx, global_scale=8.0,
                                                      reduce_range=True)}


@pytest.fixture(scope="module")
def inputs(digits) -> np.ndarray:
    return fixed_batch(digits.test, 32, seed=0).numpy()


def _lowered_convs(mod) -> list[tuple[str, ConvSpec]]:
    """(algorithm, spec) of every conv block the compiler tagged in the lowered TIR."""
    found = []
    for _, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(func)
        for block in leaf_blocks(sch):
            spec = conv_spec_of(sch, block)
            if spec is not None:
                found.append((str(sch.get(block).annotations[CONV_ALGORITHM_ATTR]), spec))
    return sorted(found, key=lambda item: (item[1].data_shape, item[1].weight_shape))


def _activation_scales(onnx_model: bytes) -> dict[str, float]:
    """Scale of every QuantizeLinear on a computed tensor (not on a weight)."""
    graph = onnx.load_from_string(onnx_model).graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    return {node.input[0]: float(constants[node.input[1]])
            for node in graph.node
            if node.op_type == "QuantizeLinear" and node.input[0] not in constants}


def test_int8_convs_reach_the_algorithm_as_int8(quantized) -> None:
    from tvm.relax.frontend.onnx import from_onnx

    qdq = quantized["calibrated"]
    # TVM's frontend alone runs the QDQ model as fake quantization: float convs
    literal = from_onnx(onnx.load_from_string(qdq), shape_dict={"input": [1, 3, 32, 32]})
    assert conv_dtypes(literal) == [("float32", "float32", "float32")] * 4

    imported, report = import_qdq_onnx(qdq, (1, 3, 32, 32))
    assert len(report.rewritten) == 4 and report.kept_float == []
    assert conv_dtypes(imported.mod) == [INT8] * 4
    lowered, legalizer = lower_to_tir(imported.mod, imported.params, DirectConv(),
                                      make_target(TARGET))
    assert legalizer.fallbacks == []
    convs = _lowered_convs(lowered)
    assert [algorithm for algorithm, _ in convs] == ["direct"] * 4
    assert [(s.data_dtype, s.weight_dtype, s.out_dtype) for _, s in convs] == [INT8] * 4
    assert any(s.is_depthwise for _, s in convs)


@pytest.mark.parametrize("variant", ["calibrated", "uncalibrated", "calibrated_reduce_range",
                                     "uncalibrated_reduce_range"])
def test_int8_tvm_computes_the_qdq_models_literal_function(
        quantized, model, inputs, tmp_path: Path, variant: str) -> None:
    qdq = quantized[variant]
    imported, _ = import_qdq_onnx(qdq, (1, 3, 32, 32))
    result = compile_model(imported, DirectConv(), TARGET, tmp_path)
    assert result.fallbacks == [] and result.conv_count == 4
    got = run_batch(load_vm(result.executable_path), inputs)
    literal = literal_qdq(qdq)(inputs)
    step = output_step(qdq)
    assert step is not None and step > 0
    check = verify_outputs(got, literal, "int8", "qdq", output_step=step)
    assert check.passed, check.explain()
    assert check.top1_agreement == 1.0
    assert check.max_abs_diff <= 3 * step  # at most a few output steps apart
    with torch.no_grad():
        fp32 = model(torch.as_tensor(inputs)).numpy()
    assert not np.allclose(got, fp32, atol=1e-6)  # really quantized
    if variant == "calibrated":  # calibration keeps int8 close to the float model
        assert verify_outputs(got, fp32, "int8", output_step=step).top1_agreement >= 0.9


CPU_WITHOUT_VNNI = {"arch": "x86_64", "flags": ["avx2", "avx512f", "avx512bw"]}
CPU_WITH_VNNI = {"arch": "x86_64", "flags": ["avx2", "avx512f", "avx512_vnni"]}


def test_reduce_range_auto_follows_the_cpus_vnni() -> None:
    assert choose_reduce_range("auto", CPU_WITHOUT_VNNI).reduce_range is True
    assert "no VNNI" in choose_reduce_range("auto", CPU_WITHOUT_VNNI).reason
    assert choose_reduce_range("auto", CPU_WITH_VNNI).reduce_range is False
    assert choose_reduce_range("auto", {"arch": "x86_64", "flags": ["avx_vnni"]}).reduce_range \
        is False
    assert choose_reduce_range("auto", {"arch": "aarch64", "flags": ["asimd"]}).reduce_range \
        is False
    for setting in (True, False):  # a setting in the config wins on any CPU
        for cpu in (CPU_WITHOUT_VNNI, CPU_WITH_VNNI):
            assert choose_reduce_range(setting, cpu).reduce_range is setting


def test_reduce_range_keeps_weights_within_seven_bits(quantized) -> None:
    def weight_range(model: bytes) -> tuple[int, int]:
        graph = onnx.load_from_string(model).graph
        weights = [numpy_helper.to_array(i) for i in graph.initializer
                   if i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 4]
        assert len(weights) == 4
        return min(int(w.min()) for w in weights), max(int(w.max()) for w in weights)

    assert weight_range(quantized["calibrated"]) == (-127, 127)
    low, high = weight_range(quantized["calibrated_reduce_range"])
    assert -64 <= low and high <= 64


def force_cpu(monkeypatch: pytest.MonkeyPatch, cpu: dict) -> None:
    """Make this process see a CPU with (or without) VNNI, whatever it runs on."""
    from dlas.targets import host

    real = host.detect_host_cpu()
    monkeypatch.setattr(host, "detect_host_cpu", lambda: {**real, **cpu})


def test_int8_compress_key_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlas.stages import stage_keys
    from dlas.sweep.grid import expand

    def keys() -> dict[str, str]:
        points = expand(parse_config(SWEEP))
        return {p.compression.name: stage_keys(p).compress for p in points}

    force_cpu(monkeypatch, CPU_WITH_VNNI)
    with_vnni = keys()
    force_cpu(monkeypatch, CPU_WITHOUT_VNNI)
    without_vnni = keys()
    for name in ("int8", "int8_uncalibrated"):  # quantized for another CPU: not served
        assert with_vnni[name] != without_vnni[name]
    for name in ("none", "float16"):  # nothing else moves
        assert with_vnni[name] == without_vnni[name]


def _run_under_emulated_cpu(cpu: str, script: str, *args: str) -> str:
    import subprocess
    import sys

    done = subprocess.run(["qemu-x86_64", "-cpu", cpu, sys.executable, "-c", script, *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


#: ONNX Runtime's outputs at graph optimizations off (the literal QDQ function) and all.
_ORT_BOTH_WAYS = """
import sys, numpy as np, onnxruntime as ort
x = np.load(sys.argv[1])
for model in sys.argv[2:]:
    for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"):
        o = ort.SessionOptions()
        o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
        np.save(f"{model}.{level}.npy", s.run(None, {s.get_inputs()[0].name: x})[0])
"""


@pytest.mark.skipif(
    __import__("shutil").which("qemu-x86_64") is None
    or __import__("platform").machine() != "x86_64",
    reason="needs qemu-user (qemu-x86_64) to run ONNX Runtime on an x86 CPU without VNNI; "
           "scripts/test.sh installs it")
def test_onnxruntime_int8_on_a_cpu_without_vnni(quantized, inputs, tmp_path: Path) -> None:
    """The int8 cause, reproduced on any x86 machine: ONNX Runtime under qemu emulating an
    AMD Zen 3 (EPYC-Milan: AVX2, no AVX-512, no VNNI). Its fused int8 convs saturate 8-bit
    weights' pair sums there; 7-bit weights compute the literal QDQ function exactly; and
    the literal function itself is the same as on this CPU."""
    np.save(tmp_path / "x.npy", inputs)
    paths = []
    for name in ("calibrated", "calibrated_reduce_range"):
        (tmp_path / f"{name}.onnx").write_bytes(quantized[name])
        paths.append(str(tmp_path / f"{name}.onnx"))
    _run_under_emulated_cpu("EPYC-Milan", _ORT_BOTH_WAYS, str(tmp_path / "x.npy"), *paths)

    def out(name: str, level: str) -> np.ndarray:
        return np.load(tmp_path / f"{name}.onnx.{level}.npy")

    step = output_step(quantized["calibrated"])
    fused_8bit = out("calibrated", "ORT_ENABLE_ALL")
    assert np.abs(fused_8bit - out("calibrated", "ORT_DISABLE_ALL")).max() > 3 * step
    np.testing.assert_array_equal(out("calibrated_reduce_range", "ORT_ENABLE_ALL"),
                                  out("calibrated_reduce_range", "ORT_DISABLE_ALL"))
    for name in ("calibrated", "calibrated_reduce_range"):  # the reference is CPU-independent
        native = literal_qdq(quantized[name])(inputs)
        assert np.abs(out(name, "ORT_DISABLE_ALL") - native).max() <= step
    # and on this CPU, whatever it has, the fused model computes it for 7-bit weights (up
    # to a requantization rounding boundary; saturation misses by more than 3 steps)
    fused = OrtModel(quantized["calibrated_reduce_range"])(inputs)
    literal = literal_qdq(quantized["calibrated_reduce_range"])(inputs)
    assert np.abs(fused - literal).max() <= step


def test_uncalibrated_ranges_are_fixed_and_calibrated_come_from_data(
        quantized, digits) -> None:
    uncalibrated = _activation_scales(quantized["uncalibrated"])
    calibrated = _activation_scales(quantized["calibrated"])
    assert uncalibrated.keys() == calibrated.keys() and len(calibrated) >= 6
    # symmetric int8: the range [-8, 8] maps onto [-127, 127]
    assert list(uncalibrated.values()) == pytest.approx([8.0 / 127] * len(uncalibrated))
    images, _ = calibration_inputs(digits, 64, seed=0)
    assert calibrated["input"] == pytest.approx(np.abs(images).max() / 127, rel=1e-5)
    assert len(set(calibrated.values())) > 3


def test_calibration_recovers_what_a_fixed_range_loses(
        quantized, model, digits, fp32_onnx) -> None:
    from dlas.models.training import evaluate

    dense = evaluate(model, digits.test)
    # the models' own functions (ONNX Runtime's fused kernels differ between CPUs)
    calibrated = literal_qdq(quantized["calibrated"]).accuracy(digits.test)
    # a fixed range of [-1, 1] clips this model's activations
    clipped = literal_qdq(quantize_qdq(fp32_onnx, global_scale=1.0)).accuracy(digits.test)
    assert dense > 0.6
    assert calibrated >= dense - 0.03
    assert clipped < calibrated - 0.05


@pytest.mark.parametrize("accumulate", ["float32", "float16"])
def test_float16_convs_compile_and_match_pytorch(
        model, inputs, tmp_path: Path, accumulate: str) -> None:
    imported = convert_float16(import_torch_model(model, (1, 3, 32, 32)), accumulate)
    assert conv_dtypes(imported.mod) == [("float16", "float16", accumulate)] * 4
    assert {str(v.dtype) for v in imported.params.values()} == {"float16"}
    result = compile_model(imported, DirectConv(), TARGET, tmp_path)
    assert result.fallbacks == [] and result.conv_count == 4
    got = run_batch(load_vm(result.executable_path), inputs)
    with torch.no_grad():
        ref = model(torch.as_tensor(inputs)).numpy()
    check = verify_outputs(got, ref, "float16")
    assert check.passed, check.explain()
    assert check.max_abs_diff > 0  # float16 arithmetic, not float32
    assert check.top1_agreement >= 0.95


def test_float16_rejects_parameters_beyond_its_range(model) -> None:
    imported = import_torch_model(model, (1, 3, 32, 32))
    name = next(iter(imported.params))
    imported.params[name] = imported.params[name] * 1e6
    with pytest.raises(ValueError, match="beyond float16's range"):
        convert_float16(imported)


def test_calibration_needs_images() -> None:
    from dlas.datasets.base import DatasetBundle

    empty = DatasetBundle("nothing", train=None, test=[], num_classes=10,
                          input_shape=(3, 32, 32))
    with pytest.raises(ValueError, match="neither a calibration slice nor a training split"):
        calibration_inputs(empty, 16, seed=0)
    with pytest.raises(ValueError, match="either calibration images or a global_scale"):
        quantize_qdq(b"unused")


SWEEP = """
name: precision
datasets: [digits]
models: [test_digits_cnn]
compression:
  - none
  - float16
  - int8
  - name: int8_uncalibrated
    params: {global_scale: 8.0}
budgets: {epochs: 1, data_fraction: 0.5, batch_size: 32, measure_repeat: 3,
          verify_samples: 8}
"""


def test_sweep_records_accuracy_of_the_compiled_models(tmp_path: Path,
                                                       shared_cache: Path) -> None:
    runner = Runner(Workspace(tmp_path, shared_cache), progress=False)
    report = runner.run(parse_config(SWEEP))
    assert report.ok == 4, [r.error for r in report.rows]
    with ResultStore(tmp_path / "results.db") as store:
        rows = {r.compression: r for r in store.rows()}
    dense, fp16 = rows["none"], rows["float16"]
    calibrated, uncalibrated = rows["int8"], rows["int8_uncalibrated"]
    assert dense.accuracy_source == "pytorch" and dense.precision == "float32"
    assert dense.accuracy > 0.6 and dense.ort_accuracy is None

    assert (fp16.precision, fp16.accuracy_source) == ("float16", "tvm")
    assert fp16.compression_ratio == 2.0 and fp16.ort_accuracy is None
    assert fp16.accuracy == pytest.approx(dense.accuracy, abs=0.02)
    assert fp16.verification_reference == "pytorch" and fp16.verified == 1
    assert fp16.size_bytes < dense.size_bytes

    for row in (calibrated, uncalibrated):
        assert row.status == "ok" and row.verified == 1
        assert (row.precision, row.accuracy_source) == ("int8", "tvm")
        assert row.compression_ratio == 4.0
        assert row.verification_reference == "qdq"
        assert row.conv_fallbacks == []
        # TVM and ONNX Runtime run the same quantized model: same predictions
        assert row.accuracy == pytest.approx(row.ort_accuracy, abs=0.01)
        assert row.compression_info["reduce_range"] is not has_vnni()
        assert row.compression_info["reduce_range_reason"].startswith("auto: ")
        assert row.fp32_top1_agreement is not None and row.fp32_max_abs_diff > 0
    assert calibrated.compression_info["calibrated"] is True
    assert uncalibrated.compression_info["calibrated"] is False
    assert calibrated.accuracy >= dense.accuracy - 0.05
    assert calibrated.fp32_top1_agreement >= 0.75


INT8_SWEEP = """
name: int8-other-cpu
datasets: [digits]
models: [test_digits_cnn]
compression: [int8]
tuning: [none, onnxruntime]
budgets: {epochs: 1, data_fraction: 0.5, batch_size: 32, measure_repeat: 3,
          verify_samples: 8}
"""


@pytest.mark.parametrize("cpu", ["without_vnni", "with_vnni"])
def test_int8_point_verifies_on_cpus_with_and_without_vnni(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch, cpu: str) -> None:
    """Both quantization paths end to end on this machine: the settings chosen for the
    CPU are recorded, TVM verifies against the literal QDQ function, and ONNX Runtime
    (as users run it) against the same reference, its accuracy measured in it."""
    # the silicon's VNNI (ONNX Runtime picks its kernels by CPUID), not DLAS_CPUINFO's
    really_vnni = has_vnni({"flags": machine_cpuinfo_fields().get("flags", "").split()})
    force_cpu(monkeypatch, CPU_WITHOUT_VNNI if cpu == "without_vnni" else CPU_WITH_VNNI)
    runner = Runner(Workspace(tmp_path, shared_cache), progress=False)
    runner.run(parse_config(INT8_SWEEP))
    with ResultStore(tmp_path / "results.db") as store:
        rows = {r.tuning: r for r in store.rows()}
    tvm, ort = rows["none"], rows["onnxruntime"]
    assert tvm.status == "ok", tvm.error
    for row in (tvm, ort):
        assert row.verification_reference == "qdq"
        assert row.compression_info["reduce_range"] is (cpu == "without_vnni")
    if cpu == "with_vnni" and not really_vnni:
        # 8-bit weights on a CPU that really lacks VNNI: ONNX Runtime's fused kernels
        # compute another function, and the baseline says so instead of timing it
        assert ort.status == "verification_failed", ort
        return
    assert ort.status == "ok" and ort.verified == 1, ort.error
    assert ort.accuracy_source == "onnxruntime" and ort.accuracy is not None
    assert tvm.accuracy == pytest.approx(ort.accuracy, abs=0.01)


def test_convs_outside_the_deployed_precision_are_reported() -> None:
    from dlas.stages.import_model import precision_fallbacks

    dtypes = [INT8, ("float32", "float32", "float32"), ("uint8", "int8", "int32")]
    (note,) = precision_fallbacks(dtypes, "int8")
    assert note.startswith("conv 1 ") and "not int8; runs in float32" in note
    assert precision_fallbacks([("float16", "float16", "float32")] * 2, "float16") == []
    assert len(precision_fallbacks(dtypes, "float32")) == 2


@pytest.mark.parametrize(("path", "algorithm"), [
    ("reference", "direct"), ("reference", "gemm"), ("reference", "spatial_pack"),
    ("host", "direct")])  # the host's kernels run on random convs in every algorithm
def test_int8_model_through_the_dot_product_equals_the_plain_int8_path(
        quantized, inputs, tmp_path: Path, path: str, algorithm: str) -> None:
    """The whole int8 model in NCHWc, its convs on an int8 dot-product kernel, gives the
    plain int8 path's outputs bit for bit: both sum the same integers exactly, in every
    dense algorithm.
    "reference" forces NCHW16c and the plain-TIR kernel (VNNI's compute, packing and
    compensation on any x86 CPU); "host" is what this CPU gets unforced (`vpdpbusd` with
    VNNI, `vpmaddubsw` with AVX2 on the 7-bit weights dlas writes there)."""
    from contextlib import nullcontext

    from dlas.algorithms.int8_dot import forced_int8_dot
    from dlas.targets.host import host_target
    from dlas.tir.schedule_helpers import forced_simd

    imported, _ = import_qdq_onnx(quantized["calibrated_reduce_range"], (1, 3, 32, 32))
    outputs = {}
    target = TARGET if path == "reference" else host_target()
    for kind in (path, "none"):
        conv = registry.create("algorithms", algorithm, {"layout": "NCHWc"})
        forcing = nullcontext() if kind == "host" else forced_int8_dot(kind)
        with forced_simd(512, 32) if path == "reference" else nullcontext(), forcing:
            lowered, _ = lower_to_tir(imported.mod, imported.params, conv,
                                      make_target(target))
            result = compile_model(imported, conv, target, tmp_path / kind)
        dot_convs = sum(bool(DOT_WEIGHT.search(func.script()))
                        for _, func in lowered.functions_items()
                        if isinstance(func, tirx.PrimFunc))
        if kind == "host" and dot_convs == 0:
            pytest.skip("this CPU has neither AVX512-VNNI nor AVX2")
        assert dot_convs == (0 if kind == "none" else 2)  # not the stem, not depthwise
        # spatial pack has no depthwise form: direct computes that conv, as documented
        assert [f for f in result.fallbacks if "depthwise" not in f] == []
        outputs[kind] = run_batch(load_vm(result.executable_path), inputs)
    np.testing.assert_array_equal(outputs[path], outputs["none"])


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["direct", "spatial_pack"])  # GEMM: direct's schedule
def test_int8_model_tuned_through_the_dot_product_keeps_its_function(
        quantized, inputs, tmp_path: Path, algorithm: str) -> None:
    """MetaSchedule's vector-layout space samples tiles around the dot-product kernel and
    tensorizes every candidate; the tuned model still computes the plain int8 path's
    outputs exactly, and a second compile replays the database (the intrinsic is
    registered before any schedule is replayed)."""
    from dlas.algorithms.int8_dot import forced_int8_dot
    from dlas.sweep.config import Budgets
    from dlas.targets.base import TargetSpec
    from dlas.targets.host import host_target
    from dlas.tir.schedule_helpers import forced_simd
    from dlas.tuning.base import TuningContext
    from dlas.tuning.metaschedule.options import MetaScheduleParams, metaschedule

    imported, _ = import_qdq_onnx(quantized["calibrated"], (1, 3, 32, 32))
    spec = TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    settings = MetaScheduleParams(trials=4, trials_per_task=2, trials_per_iter=2,
                                  population=8, early_stopping=None)

    def conv() -> ConvAlgorithm:
        return registry.create("algorithms", algorithm, {"layout": "NCHWc"})

    with forced_simd(512, 32):
        with forced_int8_dot("none"):
            plain = compile_model(imported, conv(), TARGET, tmp_path / "plain")
        want = run_batch(load_vm(plain.executable_path), inputs)
        reports = []
        for run in ("tuned", "replayed"):
            ctx = TuningContext(target=spec, budgets=Budgets(), work_dir=tmp_path / "db",
                                say=lambda _line: None)
            hook = metaschedule(settings, ctx)
            with forced_int8_dot("reference"):
                result = compile_model(imported, conv(), spec.tvm_target, tmp_path / run,
                                       schedule_hook=hook)
            np.testing.assert_array_equal(run_batch(load_vm(result.executable_path), inputs),
                                          want)
            reports.append(hook.report)
    assert reports[0].trials > 0 and reports[1].trials == 0


#: A PrimFunc parameter holding an int8 weight packed for the dot product:
#: [oc block, input block, ky, kx, group of 4, 16 or 8 lanes, 4 inputs].
DOT_WEIGHT = re.compile(r'T\.Buffer\(\((?:T\.int64\(\d+\), ){5}T\.int64\((?:16|8)\), '
                        r'T\.int64\(4\)\), "int8"\)')


def test_layers_that_differ_only_in_their_scales_share_one_compiled_function(
        monkeypatch) -> None:
    """TVM legalizes a scalar quantize scale as a literal, so every int8 layer would be
    its own function; `qparams_as_tensors` makes it a parameter and alike layers share
    one (`dlas.compiler.qparams`)."""
    from dlas.compiler.qparams import qparams_as_tensors

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    y = relax.Var("y", relax.TensorType((1, 8, 4, 4), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            outs = [bb.emit(relax.op.quantize(v, relax.const(scale, "float32"),
                                              relax.const(0, "int8"), axis=1, out_dtype="int8"))
                    for v, scale in ((x, 0.5), (y, 0.25))]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    mod = bb.get()

    def quantize_funcs(module: tvm.IRModule) -> int:
        lowered, _ = lower_to_tir(module, {}, DirectConv(), make_target(TARGET))
        return sum(isinstance(f, tirx.PrimFunc) for _, f in lowered.functions_items())

    assert quantize_funcs(mod) == 1  # lower_to_tir lifts the scales itself
    import dlas.compiler.build as build

    monkeypatch.setattr(build, "qparams_as_tensors", lambda module: module)
    assert quantize_funcs(mod) == 2  # as literals: one function per scale
    assert quantize_funcs(qparams_as_tensors(mod)) == 1


def test_lifted_scales_compute_the_model_bit_for_bit(quantized, inputs, tmp_path: Path,
                                                     monkeypatch) -> None:
    """The scales are the same float32 values, read from a buffer instead of a literal:
    the int8 model's outputs are identical with and without the lift."""
    import dlas.compiler.build as build

    imported, _ = import_qdq_onnx(quantized["calibrated"], (1, 3, 32, 32))
    outputs, functions = {}, {}  # functions: their parameters, all told
    for mode in ("lifted", "literal"):
        if mode == "literal":
            monkeypatch.setattr(build, "qparams_as_tensors", lambda mod: mod)
        conv = DirectConv(layout="NCHWc")
        lowered, _ = lower_to_tir(imported.mod, imported.params, conv, make_target(TARGET))
        functions[mode] = sum(len(f.params) for _, f in lowered.functions_items()
                              if isinstance(f, tirx.PrimFunc))
        result = compile_model(imported, conv, TARGET, tmp_path / mode)
        outputs[mode] = run_batch(load_vm(result.executable_path), inputs)
    np.testing.assert_array_equal(outputs["lifted"], outputs["literal"])
    assert functions["lifted"] > functions["literal"]  # the scales are parameters
