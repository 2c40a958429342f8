"""The layout pass's look-ahead against the pass without it, on `mixed_csr` models.

The look-ahead (`dlas/compiler/layout.py`: `_stays_nchw`, `_between_nchw`) keeps a
residual path behind sparse convs in NCHW and computes a dense conv between two sparse
ones in NCHW. The peer is the previous code path, the same pass with both rules off
(every such add into the layout, every dense conv in the layout with a reorder each
side), compiled in the same process from the same pruned models.

The models are the pruned ones a `benchmarks/sparse.py` workspace holds (its compress
cache): every compression it ran. Each model is compiled both ways; the two outputs are
compared (they must be identical: only reorders move), then both are timed with the
product's timing function (`dlas.measure.vm_timing.time_vm`), 2 threads pinned, in
`--rounds` interleaved rounds. Printed per model: reorders before and after, the medians
and the median of the per-round ratios with its 10th-90th percentiles.

    python benchmarks/layout_lookahead.py --workspace WS [--rounds 12] [--models resnet18]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dlas.algorithms.mixed_csr import MixedCSRConv
from dlas.compiler import layout
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import import_torch_model
from dlas.measure.vm_timing import load_vm, pinnable_cpus, run_batch, set_num_threads, time_vm
from dlas.targets.host import detect_host_cpu, host_target


@contextmanager
def without_lookahead() -> Any:
    """The layout pass as it was: no elementwise op left in NCHW, no conv between
    sparse ones kept there."""
    stays, between = layout._Rewriter._stays_nchw, layout._Rewriter._between_nchw
    layout._Rewriter._stays_nchw = lambda self, args, var: False
    layout._Rewriter._between_nchw = lambda self, call, var: None
    try:
        yield
    finally:
        layout._Rewriter._stays_nchw, layout._Rewriter._between_nchw = stays, between


def pruned_models(workspace: Path, models: list[str] | None) -> list[tuple[str, Path]]:
    """(label, model.pt) of every pruned model in the workspace's compress cache."""
    found = []
    for meta_path in sorted((workspace / "cache" / "compress").glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        info = meta.get("info") or {}
        if not info.get("chosen_level"):
            continue  # the unpruned model
        model = torch.load(meta_path.parent / "model.pt", weights_only=False)
        name = type(model).__name__.lower()
        if models and not any(m in name for m in models):
            continue
        shape = "x".join(map(str, info["block"])) + " " if info.get("block") else ""
        label = (f"{name} {shape}{info['chosen_level']:g} {info.get('scope', 'global')}"
                 f"{' ' + info['convs'] if info.get('convs') else ''}"
                 f"{' n:m' if info.get('m') else ''}")
        found.append((label, meta_path.parent / "model.pt"))
    return found


def reorders(report: dict[str, Any]) -> int:
    return sum(report["to_nchw"].values()) + sum(report["to_layout"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, required=True,
                        help="a benchmarks/sparse.py workspace (its pruned models)")
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    target = host_target(2)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    out_dir = Path(tempfile.mkdtemp(prefix="dlas-lookahead-"))
    vms, counts = {}, {}
    labels = []
    for i, (label, path) in enumerate(pruned_models(args.workspace, args.models)):
        imported = import_torch_model(torch.load(path, weights_only=False).eval(),
                                      (1, 3, 32, 32))
        for way in ("before", "after"):
            if way == "before":
                with without_lookahead():
                    built = compile_model(imported, MixedCSRConv(), target, out_dir / f"{i}b")
            else:
                built = compile_model(imported, MixedCSRConv(), target, out_dir / f"{i}a")
            vms[label, way] = load_vm(built.executable_path)
            counts[label, way] = reorders(built.layout)
        apart = float(np.abs(run_batch(vms[label, "before"], x)
                             - run_batch(vms[label, "after"], x)).max())
        if apart != 0.0:
            raise SystemExit(f"{label}: the two compiles compute different outputs ({apart})")
        labels.append(label)
        print(f"compiled {label}: reorders {counts[label, 'before']} -> "
              f"{counts[label, 'after']}", flush=True)
    set_num_threads(2, pinnable_cpus(2))
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in vms}
    for _ in range(args.rounds):
        for key, vm in vms.items():
            samples[key].append(float(np.median(time_vm(vm, x, repeat=20, number=10))) * 1e3)
    cpu = detect_host_cpu()
    print(f"\ncpu: {cpu['model']} (mcpu {cpu['mcpu']}), "
          f"2 threads pinned, {args.rounds} interleaved rounds; peer: the pass without "
          f"the look-ahead")
    print(f"{'model':<40} {'reorders':>9} {'before ms':>10} {'after ms':>9} "
          f"{'before/after':>12} {'p10-p90':>13}")
    for label in labels:
        before = np.array(samples[label, "before"])
        after = np.array(samples[label, "after"])
        ratio = before / after
        print(f"{label:<40} {counts[label, 'before']:>4} -> {counts[label, 'after']:<2} "
              f"{np.median(before):>10.3f} {np.median(after):>9.3f} "
              f"{np.median(ratio):>11.3f}x {np.percentile(ratio, 10):>6.3f}-"
              f"{np.percentile(ratio, 90):.3f}")


if __name__ == "__main__":
    main()
