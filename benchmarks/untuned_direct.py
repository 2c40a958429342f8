"""Untuned TVM (direct convolution, minimal thread-parallel schedule) beside PyTorch and
ONNX Runtime, measured in the same run with the same threads, batch 1, fp32.

The untuned baseline is what tuning (and the other algorithms) will be measured against;
this shows where it stands relative to what a user would otherwise run.

    python benchmarks/untuned_direct.py [--models resnet18 mobilenetv2] [--repeat 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from dlas import registry
from dlas.algorithms.direct import DirectConv
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import import_torch_model
from dlas.measure.verify import verify_outputs
from dlas.measure.vm_timing import load_vm, run_batch, set_num_threads, time_vm
from dlas.targets.host import detect_host_cpu, host_target


def time_torch(model: torch.nn.Module, x: torch.Tensor, repeat: int) -> list[float]:
    with torch.no_grad():
        model(x)  # warm-up, discarded
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            model(x)
            samples.append(time.perf_counter() - start)
    return samples


def time_onnxruntime(model: torch.nn.Module, x: torch.Tensor, repeat: int, threads: int,
                     workdir: Path) -> tuple[list[float], np.ndarray]:
    import onnxruntime as ort

    path = workdir / "model.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter warns it is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"],
                          dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = {"x": x.numpy()}
    out = sess.run(None, feed)[0]  # warm-up, discarded
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        sess.run(None, feed)
        samples.append(time.perf_counter() - start)
    return samples, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=150)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    set_num_threads(args.threads)
    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), threads {args.threads}, "
          f"batch 1, fp32, median of {args.repeat} runs after a discarded warm-up")
    header = (f"{'model':<12} {'TVM direct ms':>14} {'PyTorch ms':>11} {'ORT ms':>8} "
              f"{'TVM/PyTorch':>12} {'TVM/ORT':>8} {'compile s':>10} {'max|diff|':>10}")
    print(header)
    torch.manual_seed(0)
    for name in args.models:
        model = registry.create("models", name, {"width_multiplier": args.width},
                                num_classes=10, input_shape=(3, 32, 32)).eval()
        x = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            ref = model(x).numpy()
        with tempfile.TemporaryDirectory() as tmp:
            imported = import_torch_model(model, (1, 3, 32, 32))
            compiled = compile_model(imported, DirectConv(), host_target(args.threads),
                                     Path(tmp))
            vm = load_vm(compiled.executable_path)
            check = verify_outputs(run_batch(vm, x.numpy()), ref)
            if not check.passed:
                raise SystemExit(f"{name}: {check.explain()}")
            tvm_ms = statistics.median(time_vm(vm, x.numpy(), repeat=args.repeat)) * 1e3
            ort_samples, ort_out = time_onnxruntime(model, x, args.repeat, args.threads,
                                                    Path(tmp))
            assert np.allclose(ort_out, ref, rtol=1e-3, atol=1e-3)
        torch_ms = statistics.median(time_torch(model, x, args.repeat)) * 1e3
        ort_ms = statistics.median(ort_samples) * 1e3
        print(f"{name:<12} {tvm_ms:>14.3f} {torch_ms:>11.3f} {ort_ms:>8.3f} "
              f"{tvm_ms / torch_ms:>11.2f}x {tvm_ms / ort_ms:>7.2f}x "
              f"{compiled.compile_seconds:>10.1f} {check.max_abs_diff:>10.2e}")


if __name__ == "__main__":
    main()
