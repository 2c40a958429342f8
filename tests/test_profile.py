"""Per-layer profiles (`dlas.profile`): the kernel manifest maps kernels to the model's
layers, the layer times add up, the record survives SQLite, and `dlas profile` profiles
a sweep of a model plugin that has no profiling code of its own."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dlas.compiler.build import ConvLowering
from dlas.measure.stopping import RoundsPolicy
from dlas.profile.kernels import KernelInfo, KernelManifest
from dlas.results.layer_profile import LayerTime, PointProfile
from dlas.results.profiles import load_profile, save_profile
from dlas.tir.conv_spec import ConvSpec
from tests.timing_bounds import assert_same_work_timing


def _spec(cin: int = 4, cout: int = 8, groups: int = 1) -> ConvSpec:
    return ConvSpec(data_shape=(1, cin, 8, 8), weight_shape=(cout, cin // groups, 3, 3),
                    strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=groups,
                    data_dtype="float32", weight_dtype="float32", out_dtype="float32")


def _manifest() -> KernelManifest:
    conv = KernelInfo("fused_conv", specs=[_spec()], algorithms=["direct"], has_conv=True)
    reshape = KernelInfo("reshape")
    dense = KernelInfo("fused_matmul_add", flops=100.0)
    convs = [ConvLowering(0, _spec(), "direct", 200), ConvLowering(1, _spec(), "direct", 100)]
    return KernelManifest({"fused_conv": conv, "reshape": reshape, "fused_matmul_add": dense},
                          ["fused_conv", "fused_conv", "reshape", "fused_matmul_add"], convs)


def test_manifest_maps_each_conv_call_to_the_models_conv_in_order() -> None:
    mapped = _manifest().map_calls(["fused_conv", "fused_conv", "fused_matmul_add"])
    assert [info.symbol for info, _ in mapped] == ["fused_conv", "fused_conv",
                                                   "fused_matmul_add"]
    assert [conv.index if conv else None for _, conv in mapped] == [0, 1, None]
    assert [conv.nnz if conv else None for _, conv in mapped] == [200, 100, None]
    assert [info.op for info, _ in mapped] == ["conv2d", "conv2d", "dense"]


def test_conv_calls_find_their_layer_by_spec_not_by_order() -> None:
    """Fusion may run a shortcut conv before the conv beside it: each call still gets
    the model's conv with its own shape."""
    shortcut = KernelInfo("k_shortcut", specs=[_spec(4, 16)], has_conv=True)
    main_conv = KernelInfo("k_main", specs=[_spec(4, 8)], has_conv=True)
    convs = [ConvLowering(0, _spec(4, 8), "direct", 10),
             ConvLowering(1, _spec(4, 16), "direct", 20)]
    manifest = KernelManifest({"k_shortcut": shortcut, "k_main": main_conv},
                              ["k_shortcut", "k_main"], convs)
    mapped = manifest.map_calls(["k_shortcut", "k_main"])
    assert [(conv.index, conv.nnz) for _, conv in mapped] == [(1, 20), (0, 10)]


def test_manifest_refuses_calls_its_lowering_does_not_make() -> None:
    with pytest.raises(ValueError, match="recompile"):
        _manifest().map_calls(["fused_conv", "fused_matmul_add"])  # a conv went missing
    with pytest.raises(ValueError, match="recompile"):
        _manifest().map_calls(["fused_conv", "fused_conv", "fused_matmul_add", "extra"])


def test_kernel_ops_from_specs_and_symbols() -> None:
    assert KernelInfo("k", specs=[_spec(8, 8, 8)], has_conv=True).op == "depthwise_conv2d"
    assert KernelInfo("max_pool2d").op == "pool"
    assert KernelInfo("mean").op == "pool"
    assert KernelInfo("fused_add_relu").op == "elementwise"
    assert KernelInfo("layout_transform").op == "layout"


def test_profile_round_trips_through_sqlite(tmp_path: Path) -> None:
    layers = [LayerTime(index=0, name="conv", op="conv2d", time_us=12.5, ci_us=[12.0, 13.0],
                        data_shape=[1, 4, 8, 8], macs=100, flops=200.0, bytes=64,
                        roof_fraction=0.4),
              LayerTime(index=1, name="dense", op="dense", time_us=2.0)]
    profile = PointProfile(key="k", runtime="tvm", label="direct", latency_median_ms=0.02,
                           layers_sum_ms=0.0145, unaccounted=0.275, method="test",
                           layers=layers)
    conn = sqlite3.connect(tmp_path / "r.db")
    save_profile(conn, "p", "k", profile, {"peak_gflops": {"float32": 10.0}})
    save_profile(conn, "p", "k", profile, None)  # replaced, not duplicated
    got, limits = load_profile(conn, "p", "k")
    assert got == profile and limits is None
    assert load_profile(conn, "p", "other") is None
    n = conn.execute("SELECT COUNT(*), SUM(time_us) FROM profile_layers").fetchone()
    assert n == (2, 14.5)  # queryable as plain SQL


#: Rounds enough for a median, not for a result.
_POLICY = RoundsPolicy(samples=9, min_rounds=3, max_rounds=6, placement_budget_s=0.0,
                       noise_retries=1, noise_budget_s=1.0)


@pytest.mark.slow
def test_a_gpu_replay_waits_for_each_kernel_and_for_each_no_op() -> None:
    """On a GPU a kernel call only launches it: the replay waits for the device after
    every call, and after every no-op call that measures Python's cost, so the wait's
    own cost is taken out with it; on a CPU there is nothing to wait for."""
    import tvm

    from dlas.profile.tvm_kernels import KernelCall, ReplaySubject, device_sync

    assert device_sync(tvm.cpu(0)) is None
    gpu = tvm.cuda(0)  # a handle only: nothing here calls it without a GPU
    assert device_sync(gpu) == gpu.sync
    waits: list[int] = []
    nop = tvm.get_global_func("testing.nop")
    calls = [KernelCall(f"kernel{i}", nop, [i]) for i in range(3)]
    replay = ReplaySubject(calls, [0], sync=lambda: waits.append(1))
    samples = replay.time(n=2, warmup=1)
    assert len(samples) == 2 and all(s >= 0 for s in samples)
    # one warm-up pass (a wait at its end), then 2 replays and 2 no-op passes of 3 calls
    assert len(waits) == 1 + 2 * 3 + 2 * 3
    assert len(ReplaySubject(calls, [0]).time(n=1, warmup=1)) == 1


def test_tvm_profile_of_a_compiled_model_adds_up(tmp_path: Path) -> None:
    """A real compiled model (at 128x128, so kernels, not call overheads, take the
    time): every kernel call profiled, its convs mapped with their
    algorithm, MACs and non-zeros; the layers, the replay and the model agree."""
    import torch

    from dlas.algorithms.direct import DirectConv
    from dlas.compiler.build import compile_model
    from dlas.compiler.relax_import import import_torch_model
    from dlas.measure.session import LocalCPUSession
    from dlas.profile.kernels import kernel_manifest
    from dlas.profile.tvm_kernels import profile_tvm
    from dlas.stages.measure import TvmVariant
    from tests.plugins.tiny_cnn import TinyCNN

    torch.manual_seed(0)
    model = TinyCNN(4).eval()
    with torch.no_grad():
        model.pw.weight[:, :4] = 0.0  # some zeros: non-zeros must be counted
    imported = import_torch_model(model, (1, 3, 128, 128))
    target = {"kind": "llvm"}
    result = compile_model(imported, DirectConv(), target, tmp_path)
    variant = TvmVariant(LocalCPUSession(), result.executable_path, 1)
    variant.label = "direct"
    manifest = kernel_manifest(imported, DirectConv(), target, None)
    x = np.random.default_rng(0).standard_normal((1, 3, 128, 128)).astype("float32")
    variant.x = x
    profile = profile_tvm(variant, manifest, x, placement=None, load=None, single=True,
                          threads=1, pinned=False, policy=_POLICY)
    convs = [layer for layer in profile.layers if layer.conv_index is not None]
    assert [c.conv_index for c in convs] == list(range(result.conv_count))
    assert all(c.algorithm == "direct" and c.schedule == "minimal" for c in convs)
    assert [c.op for c in convs] == ["conv2d", "depthwise_conv2d", "conv2d"]
    pointwise = convs[2]
    assert pointwise.macs == 8 * 64 * 64 * 8  # 8 out x 64x64 pixels x 8 in, 1x1
    assert pointwise.nnz == int(np.count_nonzero(model.pw.weight.detach().numpy())) == 32
    assert pointwise.flops == 2 * pointwise.macs and pointwise.bytes and pointwise.bytes > 0
    assert all(layer.time_us > 0 for layer in profile.layers)
    assert all(layer.alone_us and layer.alone_us > 0 for layer in profile.layers)
    assert profile.replay_ms is not None and profile.outside_us is not None
    # the sums are the sums of their parts, exactly ...
    assert profile.layers_sum_ms == pytest.approx(
        sum(layer.time_us for layer in profile.layers) / 1e3)
    assert profile.accounted == pytest.approx(
        (profile.layers_sum_ms + profile.outside_us / 1e3) / profile.latency_median_ms)
    # ... and the timings of the same kernels agree in magnitude: kernels in sequence
    # against their replay (a median of sums against a sum of medians), and layers
    # plus the VM's own work against the model (tests/timing_bounds.py says why no
    # closer: this read 1.31 on a Cascade Lake with nothing else running)
    assert_same_work_timing(profile.layers_sum_ms, profile.replay_ms, "layers / replay")
    assert_same_work_timing(profile.layers_sum_ms + profile.outside_us / 1e3,
                            profile.latency_median_ms, "accounted")
    assert abs(sum(layer.share for layer in profile.layers) - 1.0) < 1e-6


@pytest.mark.slow
def test_dlas_profile_profiles_every_measured_point_of_a_plugin_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`tiny_cnn` is a model plugin with no profiling code: its TVM point and its ONNX
    Runtime and PyTorch baselines all get a profile, stored, and printed as JSON."""
    from dlas.cli import main
    from tests.conftest import tiny_sweep

    config = tmp_path / "tiny.yaml"
    config.write_text(tiny_sweep().replace("tuning: [none]",
                                           "tuning: [none, onnxruntime, pytorch]"))
    ws = ["--workspace", str(tmp_path / "ws")]
    # the run profiles its measured points itself (--profile-layers) ...
    assert main(["run", str(config), "--no-progress", "--profile-layers", *ws]) == 0
    assert "per-layer profiles: 3 of 3 measured point(s)" in capsys.readouterr().out
    # ... so `dlas profile` only reads them
    assert main(["profile", str(config), "--json", *ws]) == 0
    captured = capsys.readouterr()
    assert "profiling" not in captured.err
    out = json.loads(captured.out)
    points = out["points"]
    assert sorted(p["algorithm"] for p in points) == ["direct", "onnxruntime", "pytorch"]
    for point in points:
        assert point["error"] is None and point["latency_median_ms"] > 0
        assert point["layers"], point["algorithm"]
        # layers plus the time outside them give the latency back, for every runtime,
        # in magnitude (tests/timing_bounds.py says why no closer)
        assert point["outside_us"] is not None and point["outside_us"] >= 0
        assert_same_work_timing(point["accounted"], 1.0, f"{point['algorithm']} accounted")
        for layer in point["layers"]:
            assert {"time_us", "flops", "bytes", "roof_fraction"} <= set(layer)
        convs = [layer for layer in point["layers"] if layer["op"].endswith("conv2d")]
        assert len(convs) == 3, (point["algorithm"], [la["op"] for la in point["layers"]])
        assert all(c["macs"] and c["roof_fraction"] for c in convs)
    limits = out["limits"][0]
    assert limits["peak_gflops"]["float32"] > 0
    # a second call reads the stored profiles: nothing is profiled again
    assert main(["profile", str(config), "--json", *ws]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["points"] == points
    assert "profiling" not in captured.err
    # the profiles train the predictor, which predicts a sweep that was never run
    unseen = tmp_path / "unseen.yaml"
    unseen.write_text(tiny_sweep("unseen", compression=["weight_pruning"],
                                 algorithms=["direct", "direct_csr"]))
    assert main(["predict", str(unseen), "--json",
                 "--train-workspace", str(tmp_path / "ws"),
                 "--workspace", str(tmp_path / "other")]) == 0
    predicted = json.loads(capsys.readouterr().out)
    assert predicted["trained_points"] == 1
    assert [p["predicted_ms"] > 0 for p in predicted["points"]] == [True, True]
    assert all(p["measured_ms"] is None for p in predicted["points"])
    csr = next(p for p in predicted["points"] if "direct_csr" in p["label"])
    assert any("direct_csr" in w for w in csr["warnings"])  # never measured: said so
    # and `plan --estimate --predict` shows the same (default-learner) predictions beside
    # the estimate
    assert main(["plan", str(unseen), "--estimate", "--predict", "--json", *ws]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert [p["predicted_ms"] for p in planned["predicted_latency"]["points"]] == \
        pytest.approx([p["predicted_ms"] for p in predicted["points"]])


def test_sparse_kernels_are_credited_with_their_non_zeros() -> None:
    """A pixel-tile sparse kernel (its entry loop inside its block) computes the weight's
    non-zeros: the manifest marks it dynamic, so its layer's FLOPs are 2 x nnz x pixels
    (what its roof is judged on); `mixed_csr`'s dense convs keep 2 x MACs."""
    import copy

    import torch

    from dlas import registry
    from dlas.algorithms.mixed_csr import MixedCSRConv
    from dlas.compiler.relax_import import import_torch_model
    from dlas.compression.pruning import (
        make_permanent,
        prune_weights_global_l1,
        prune_weights_per_layer_l1,
    )
    from dlas.profile.kernels import kernel_manifest
    from dlas.targets.host import host_target

    torch.manual_seed(0)
    model = registry.create("models", "resnet18", {"width_multiplier": 0.25}, num_classes=10,
                            input_shape=(3, 32, 32)).eval()
    pruned = make_permanent(prune_weights_per_layer_l1(copy.deepcopy(model), 0.9)).eval()
    imported = import_torch_model(pruned, (1, 3, 32, 32))
    manifest = kernel_manifest(imported, registry.create("algorithms", "spatial_pack_csr", {}),
                               host_target(2), None)
    convs = [info for info in manifest.functions.values() if info.has_conv]
    assert convs and all(info.dynamic for info in convs)
    # globally pruned, the first stage stays dense-ish: mixed computes it dense
    globally = make_permanent(prune_weights_global_l1(copy.deepcopy(model), 0.9)).eval()
    mixed = kernel_manifest(import_torch_model(globally, (1, 3, 32, 32)),
                            MixedCSRConv(dense_above=0.5), host_target(2), None)
    kinds = {info.dynamic for info in mixed.functions.values() if info.has_conv}
    assert kinds == {True, False}
