"""Per-operator profiles of the baselines (`dlas.profile.peer_profile`): ONNX Runtime's and
PyTorch's own profilers find a tiny CNN's conv, depthwise conv and dense layer with the
work computed by hand, the non-zeros of a partly zeroed weight, positive times, and
layer times that add up to most of the whole inference as the same profiler timed it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dlas.profile.ort_profile import ORT_METHOD, ort_profile_run
from dlas.profile.peer_profile import profile_peer
from dlas.profile.profiled_run import ProfiledRun
from dlas.profile.torch_profile import TORCH_METHOD, torch_profile_run
from dlas.results.layer_profile import LayerTime
from dlas.tuning.baselines.base import BaselineModel, Peer

INPUT = (3, 64, 64)
#: 12 channels: not a multiple of ONNX Runtime's NCHWc block, so its convs compute padded
#: channels and the profile must still credit the model's work.
CHANNELS, CLASSES = 12, 10
#: Work computed by hand: N x Cout x OH x OW x Cin/groups x KH x KW, and M x N x K.
CONV_MACS = 1 * CHANNELS * 64 * 64 * 3 * 3 * 3
DEPTHWISE_MACS = 1 * CHANNELS * 32 * 32 * 1 * 3 * 3
DENSE_MACS = 1 * CLASSES * CHANNELS
#: Layers' summed time over the whole inference's, as the same profiler timed both.
COVERAGE = (0.3, 1.5)
RUNS = 20


class TinyCnn(nn.Module):
    """conv 3x3 -> relu -> depthwise 3x3 (stride 2) -> relu -> pool -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, 3, padding=1)
        self.relu = nn.ReLU()
        self.dw = nn.Conv2d(CHANNELS, CHANNELS, 3, stride=2, padding=1, groups=CHANNELS)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(CHANNELS, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.conv(x))
        x = self.pool(torch.relu(self.dw(x)))  # a functional op: outside any leaf module
        return self.fc(torch.flatten(x, 1))


@pytest.fixture(scope="module")
def model() -> TinyCnn:
    torch.manual_seed(0)
    net = TinyCnn().eval()
    with torch.no_grad():
        net.conv.weight[: CHANNELS // 3] = 0  # a third of the filters pruned
    return net


@pytest.fixture(scope="module")
def onnx_model(model: TinyCnn) -> bytes:
    from dlas.compression.int8 import export_onnx  # the export ONNX Runtime baselines run

    return export_onnx(model, INPUT)


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.random.default_rng(0).random((1, *INPUT), dtype=np.float32)


def one(layers: list[LayerTime], op: str) -> LayerTime:
    (layer,) = [layer for layer in layers if layer.op == op]
    return layer


def check_layers(run: ProfiledRun, model: TinyCnn) -> None:
    """The conv, depthwise conv and dense layer with their work, positive times, and
    layers that cover most of the whole inference."""
    layers = run.layers
    conv, depthwise = one(layers, "conv2d"), one(layers, "depthwise_conv2d")
    dense = one(layers, "dense")
    assert (conv.macs, depthwise.macs, dense.macs) == (CONV_MACS, DEPTHWISE_MACS, DENSE_MACS)
    assert conv.flops == 2 * CONV_MACS
    assert conv.nnz == int(torch.count_nonzero(model.conv.weight)) < model.conv.weight.numel()
    assert depthwise.nnz == model.dw.weight.numel()
    assert dense.nnz == model.fc.weight.numel()
    assert (conv.data_shape, conv.weight_shape, conv.out_shape) == (
        [1, *INPUT], [CHANNELS, 3, 3, 3], [1, CHANNELS, 64, 64])
    assert (conv.strides, conv.padding, conv.groups) == ([1, 1], [1, 1, 1, 1], 1)
    assert (depthwise.strides, depthwise.groups) == ([2, 2], CHANNELS)
    assert depthwise.out_shape == [1, CHANNELS, 32, 32]
    assert (conv.conv_index, depthwise.conv_index) == (0, 1)
    assert conv.dtype == "float32" and conv.bytes and conv.bytes > 0
    assert [layer.index for layer in layers] == list(range(len(layers)))
    assert any(layer.op == "pool" for layer in layers)
    assert all(layer.time_us > 0 and layer.calls == 1 for layer in layers)
    assert all(layer.ci_us[0] <= layer.time_us <= layer.ci_us[1] for layer in layers)
    assert abs(sum(layer.share for layer in layers) - 1) < 1e-9
    assert run.runs == RUNS and run.whole_us > 0 and run.unprofiled_us > 0
    print(f"{run.method}: layers {run.layers_sum_us:.1f} us, whole {run.whole_us:.1f} us "
          f"(coverage {run.coverage:.2f}), unprofiled {run.unprofiled_us:.1f} us "
          f"({run.coverage_unprofiled:.2f})")
    assert COVERAGE[0] <= run.coverage <= COVERAGE[1]


def test_onnxruntime_profile_finds_the_layers_and_their_work(
        onnx_model: bytes, model: TinyCnn, x: np.ndarray) -> None:
    run = ort_profile_run(onnx_model, x, threads=1, runs=RUNS)
    assert run.method == ORT_METHOD and not run.notes
    check_layers(run, model)


@pytest.mark.parametrize("level", ["disabled", "extended"])
def test_onnxruntime_profile_at_other_optimisation_levels(
        onnx_model: bytes, x: np.ndarray, tmp_path: Any, level: str) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(onnx_model)
    layers = ort_profile_run(path, x, threads=1, runs=3, graph_optimization=level).layers
    assert one(layers, "conv2d").macs == CONV_MACS
    assert one(layers, "depthwise_conv2d").macs == DEPTHWISE_MACS
    # unfused, the conv's relu runs as its own node ("/relu/Relu" from the TorchScript
    # exporter, "node_relu" from the dynamo one); fused (extended) into the conv
    relu = [layer for layer in layers if layer.name in ("/relu/Relu", "node_relu")]
    assert bool(relu) == (level == "disabled")
    assert not list(tmp_path.glob("ort_profile*"))


def test_torch_profile_finds_the_layers_and_their_work(model: TinyCnn, x: np.ndarray) -> None:
    threads = torch.get_num_threads()
    run = torch_profile_run(model, x, threads=1, runs=RUNS)
    assert torch.get_num_threads() == threads  # restored
    assert run.method == TORCH_METHOD
    check_layers(run, model)
    names = [layer.name for layer in run.layers]
    # leaf modules by name, and ops called outside any module by the op
    assert names == ["conv", "relu", "dw", "aten::relu", "pool", "aten::flatten", "fc"]


def test_profile_peer_dispatches_on_the_runtime(model: TinyCnn, x: np.ndarray) -> None:
    from dlas.tuning.baselines.ort import OrtPeer
    from dlas.tuning.baselines.torch_eager import TorchPeer

    baseline = BaselineModel(model, "float32", INPUT, threads=1)
    ort_peer, torch_peer = OrtPeer(baseline), TorchPeer(baseline)
    try:
        ort_run = profile_peer(ort_peer, x, threads=1, runs=3)
        torch_run = profile_peer(torch_peer, x, threads=1, runs=3)
    finally:
        torch_peer.close()
    assert (ort_run.method, torch_run.method) == (ORT_METHOD, TORCH_METHOD)
    for run in (ort_run, torch_run):
        assert one(run.layers, "conv2d").macs == CONV_MACS
        assert one(run.layers, "dense").macs == DENSE_MACS
        assert run.unprofiled_us is not None and run.unprofiled_us > 0


def test_a_profile_fitted_to_the_latency_adds_up_to_it(x: np.ndarray,
                                                       onnx_model: bytes) -> None:
    """A baseline's layers and what lies between them are shares of the profiled
    inference: fitted to any latency, they sum to it and keep their proportions."""
    run = ort_profile_run(onnx_model, x, threads=1, runs=RUNS)
    latency_us = 1000.0
    layers, outside_us, scale = run.fitted(latency_us)
    total = sum(layer.time_us * layer.calls for layer in layers) + outside_us
    # the layers' events lie inside the run's, but durations are whole microseconds
    assert total == pytest.approx(latency_us * max(1.0, run.coverage))
    assert scale == pytest.approx(latency_us / run.whole_us)
    for fitted, raw in zip(layers, run.layers, strict=True):
        assert fitted.time_us == pytest.approx(raw.time_us * scale)
    assert run.layers[0].time_us != layers[0].time_us  # the run's own layers unchanged

    class OtherPeer(Peer):
        runtime = "other"

        def run(self, inputs: np.ndarray) -> np.ndarray:
            return inputs

        def bind(self, x: np.ndarray) -> Any:
            return lambda: None

    with pytest.raises(NotImplementedError, match="OtherPeer"):
        profile_peer(OtherPeer(), x, threads=1, runs=3)
