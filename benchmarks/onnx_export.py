"""ONNX Runtime's baseline on PyTorch's two ONNX exporters: what each export costs, and
how fast ONNX Runtime runs what each one made.

dlas exports the compressed module with the TorchScript exporter, and with the dynamo
exporter where that one fails (`dlas.compression.int8.export_onnx`). This prints, per
model: the seconds of each export (median of `--exports`), and ONNX Runtime's batch-1
latency on each export through the baseline's own path (`OrtPeer`, `time_peer`: what a
sweep's `onnxruntime` row times), the two sessions interleaved in `--rounds` rounds of
`--repeat` samples: median and interquartile range over all, the ratio dynamo's median
over TorchScript's, and the vCPU placement of the rounds (read before each round with
the sweep's own probe, `dlas.measure.placement`; both exports of a round share it).
Both exports are checked against PyTorch first.

    python benchmarks/onnx_export.py [--models resnet18 mobilenetv2] [--sizes 16 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from dlas import registry
from dlas.compression import int8
from dlas.measure.placement import PlacementProbe, probe_unavailable
from dlas.targets.host import allowed_cpus, detect_host_cpu
from dlas.tuning.baselines.base import BaselineModel, time_peer
from dlas.tuning.baselines.ort import OrtPeer


def export_with(exporter: str) -> Callable[[torch.nn.Module, tuple[int, ...]], bytes]:
    """`export_onnx` with the TorchScript exporter, or with it failing (dynamo then)."""
    def export(model: torch.nn.Module, shape: tuple[int, ...]) -> bytes:
        real = int8._export_torchscript
        if exporter == "dynamo":
            def fail(*_args: object) -> bytes:
                raise RuntimeError("benchmark: the dynamo exporter's turn")

            int8._export_torchscript = fail  # type: ignore[assignment]
        try:
            data = int8.export_onnx(model, shape)
        finally:
            int8._export_torchscript = real  # type: ignore[assignment]
        assert int8.exporter_of(data) == exporter
        return data
    return export


def _iqr_ms(seconds: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(seconds, n=4)
    return f"{q1 * 1e3:.3f}, {q3 * 1e3:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[16, 32])
    parser.add_argument("--width", type=float, default=0.5)
    parser.add_argument("--exports", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=150)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    registry.load_plugins()
    torch.set_num_threads(args.threads)
    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), ONNX Runtime {args.threads} "
          f"threads, batch 1, fp32; latency: median of {args.rounds} interleaved rounds x "
          f"{args.repeat} samples; export: median of {args.exports}")
    probe = None if probe_unavailable() else PlacementProbe(allowed_cpus()[:args.threads])
    print(f"{'model':<12} {'size':>4} {'export ts s':>11} {'export dyn s':>12} "
          f"{'ORT ts ms [IQR]':>22} {'ORT dyn ms [IQR]':>22} {'dyn / ts':>8}  rounds")
    for name in args.models:
        for size in args.sizes:
            shape = (3, size, size)
            torch.manual_seed(0)
            model = registry.create("models", name, {"width_multiplier": args.width},
                                    num_classes=10, input_shape=shape).eval()
            x = torch.randn(1, *shape)
            with torch.no_grad():
                reference = model(x).numpy()
            seconds: dict[str, float] = {}
            peers: dict[str, OrtPeer] = {}
            for exporter in ("torchscript", "dynamo"):
                export = export_with(exporter)
                took = []
                for _ in range(args.exports):
                    start = time.perf_counter()
                    data = export(model, shape)
                    took.append(time.perf_counter() - start)
                seconds[exporter] = statistics.median(took)
                int8_export = int8.export_onnx
                int8.export_onnx = lambda m, s, d=data: d  # type: ignore[assignment]
                try:
                    peer = OrtPeer(BaselineModel(model, "float32", shape, threads=args.threads))
                finally:
                    int8.export_onnx = int8_export  # type: ignore[assignment]
                np.testing.assert_allclose(peer.run(x.numpy()), reference, rtol=1e-4,
                                           atol=1e-4)
                peers[exporter] = peer
            samples: dict[str, list[float]] = {k: [] for k in peers}
            placements: list[str] = []
            for _ in range(args.rounds):
                placements.append(probe.read().state if probe is not None else "unknown")
                for exporter, peer in peers.items():
                    samples[exporter] += time_peer(peer.bind(x.numpy()), args.repeat)
            ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
            cells = {k: f"{ms[k]:.3f} [{_iqr_ms(v)}]" for k, v in samples.items()}
            seen = ", ".join(f"{state} {placements.count(state)}"
                             for state in sorted(set(placements)))
            print(f"{name:<12} {size:>4} {seconds['torchscript']:>11.2f} "
                  f"{seconds['dynamo']:>12.2f} {cells['torchscript']:>22} "
                  f"{cells['dynamo']:>22} {ms['dynamo'] / ms['torchscript']:>7.2f}x  {seen}",
                  flush=True)
            for peer in peers.values():
                peer.close()


if __name__ == "__main__":
    main()
