"""Pruning that pays? The sparse kernels beside the best dense variant and ONNX Runtime.

One `dlas run` sweep (the product's own timing path: fresh timing workers, interleaved
rounds, placement recorded), in one workspace:

* the models (width 0.5, digits, trained `--epochs`, fp32, batch 1, the host's threads),
  dense: direct, GEMM and spatial pack in NCHW and NCHWc, and ONNX Runtime;
* pruned to each of `--levels` (L1 unstructured `weight_pruning`, in each of `--scopes`:
  the paper's global ranking, and per layer; fine-tuned `--finetune-epochs`), and with
  `--structured`, block pruning at the AVX-512 width (16x1) and 4x1 at 80%, 2:4, and
  90% of the 1x1 convs' weights alone (`convs: pointwise`, per layer, Elsen et al.'s):
  every CSR algorithm in NCHW, direct CSR in NCHWc (block CSR), and `mixed_csr` (per conv
  sparse or dense, by density);
* with `--avx2` on an AVX-512 host, all of it again for `-mcpu haswell` (the AVX2 code
  path, forced), so both SIMD paths are measured on one machine; `--only-avx2` times the
  AVX2 path alone. With `--structured`, a run of the AVX2 path (forced, or an AVX2 host)
  adds block pruning at its SIMD width (8x1).

Printed per target and model: ONNX Runtime, the best dense variant (any layout; the peer
every sparse row is divided by), then each sparse row: its median, its speedup over the
best dense in one placement (`-` when the two rows share none), its percentage of the
expected speedup (the paper's metric: speedup over the ideal 1 / (1 - sparsity)), and the
pruned model's accuracy beside the dense one's. A JSON copy goes to WORKSPACE/sparse.json.

    python benchmarks/sparse.py [--workspace DIR] [--models resnet18 mobilenetv2]
                                [--levels 0.8 0.9] [--scopes global layer]
                                [--structured] [--avx2 | --only-avx2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import dlas  # noqa: E402 - `dlas ARGS` as a user runs it, output to the log

DENSE = ["direct", "gemm", "spatial_pack"]
CSR = ["direct_csr", "gemm_csr", "spatial_pack_csr"]
#: Structured options run with `--structured`: (option, extra params, level).
STRUCTURED = [("block_pruning", {"block": [16, 1]}, 0.8),
              ("block_pruning", {"block": [4, 1]}, 0.8),
              ("nm_pruning", {}, 0.5),
              # Elsen et al.'s sparse MobileNets: 1x1 convs only, each at the level
              ("weight_pruning", {"convs": "pointwise", "scope": "layer"}, 0.9)]


#: The label `dlas results` gives the pointwise-only row of STRUCTURED.
POINTWISE_LABEL = "weight_pruning(convs=pointwise,level=0.9,levels=[0.9],scope=layer)"


def pruning(name: str, level: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"levels": [level], "level": level}
    params.update(extra or {})
    return {"name": name, "params": params}


def host_has_avx512() -> bool:
    """Whether the host's own target takes the 512-bit SIMD path (else AVX2's 256-bit), as
    the schedules decide it (`target_simd`)."""
    from tvm.target import Target

    from dlas.targets.host import host_target
    from dlas.tir.schedule_helpers import target_simd

    return target_simd(Target(host_target())).bits >= 512


def config(args: argparse.Namespace) -> dict[str, Any]:
    compression: list[Any] = ["none"]
    for scope in args.scopes:
        extra = {} if scope == "global" else {"scope": scope}
        compression += [pruning("weight_pruning", level, extra) for level in args.levels]
    if args.structured:
        avx2_block = ([("block_pruning", {"block": [8, 1]}, 0.8)]
                      if args.avx2 or not host_has_avx512() else [])
        for name, extra, level in [*STRUCTURED, *avx2_block]:
            scopes = args.scopes if name == "block_pruning" else ["global"]
            for scope in scopes:
                compression.append(pruning(name, level, {
                    **extra, **({} if scope == "global" else {"scope": scope})}))
    dense = [a if layout == "NCHW" else {"name": a, "params": {"layout": layout}}
             for a in DENSE for layout in ("NCHW", "NCHWc")]
    sparse = [*CSR, {"name": "direct_csr", "params": {"layout": "NCHWc"}}, "mixed_csr"]
    targets: list[Any] = [] if args.only_avx2 else ["host"]
    if args.avx2:
        targets.append({"name": "host", "params": {"mcpu": "haswell"}})
    dense_labels = [a if isinstance(a, str) else f"{a['name']}(layout=NCHWc)" for a in dense]
    return {
        "name": "sparse",
        "datasets": ["digits"],
        "models": [{"name": m, "params": {"width_multiplier": 0.5}} for m in args.models],
        "compression": compression,
        "algorithms": [*dense, *sparse],
        "tuning": ["none", "onnxruntime"],
        "targets": targets,
        "budgets": {"epochs": args.epochs, "batch_size": 64,
                    "finetune_epochs": args.finetune_epochs, "finetune_lr": 0.01,
                    "measure_repeat": 150, "verify_samples": 16, "seed": 0},
        # dense kernels do the same work on pruned weights: time them on the dense model
        "exclude": [{"algorithms": dense_labels,
                     "compression": [c["name"] for c in compression if isinstance(c, dict)]},
                    # ResNet18 has three 1x1 convs (1.4% of its weights): pruning only
                    # those says nothing about its speed
                    # (only where ResNet18 is in the sweep: a rule naming a model it
                    # lacks is a config error)
                    *([{"models": "resnet18", "compression": POINTWISE_LABEL}]
                      if args.structured and "resnet18" in args.models else [])],
    }


def rows(workspace: Path) -> list[Any]:
    from dlas.results.store import ResultStore

    with ResultStore(workspace / "results.db") as store:
        return store.rows(sweep="sparse")


def same_placement(row: Any, placement: str | None) -> float | None:
    """`row`'s median where it compares with a timing taken in `placement`, else its
    median in that placement, else None (`dlas.measure.placement.comparable`)."""
    from dlas.measure.placement import comparable

    if comparable(row.placement, placement):
        return row.latency_median_ms
    there = (row.latency_by_placement or {}).get(placement or "")
    return there.get("median_ms") if there else None


def level_of(row: Any) -> float | None:
    info = row.compression_info or {}
    return info.get("chosen_level")


def short_label(row: Any) -> str:
    """`weight_pruning 0.9 layer`, `block_pruning 16x1 0.8 global`, `nm_pruning 2:4`."""
    info = row.compression_info or {}
    name = str(row.compression).split("(")[0]
    level = info.get("chosen_level")
    if name == "nm_pruning":
        m = int(info.get("m", 4))
        return f"{name} {round(m * (1 - (level or 0)))}:{m}"
    block = "x".join(str(b) for b in info["block"]) + " " if info.get("block") else ""
    convs = f" {info['convs']}" if info.get("convs") else ""
    return f"{name} {block}{level:g} {info.get('scope', 'global')}{convs}"


def table(all_rows: list[Any]) -> list[dict[str, Any]]:
    """Print the tables; return their records."""
    records: list[dict[str, Any]] = []
    for target in sorted({r.target for r in all_rows}):
        for model in sorted({str(r.model).split("(")[0] for r in all_rows}):
            mine = [r for r in all_rows if r.target == target and str(r.model).startswith(model)
                    and r.status == "ok"]
            dense = [r for r in mine if r.compression == "none" and r.tuning == "none"]
            if not dense:
                continue
            best = min(dense, key=lambda r: r.latency_median_ms)
            ort = next((r for r in dense + [r for r in mine if r.tuning == "onnxruntime"
                                            and r.compression == "none"]
                        if r.tuning == "onnxruntime"), None)
            print(f"\n{target} / {model}: best dense {best.algorithm} "
                  f"{best.latency_median_ms:.3f} ms [{best.latency_ci_low_ms or 0:.3f}, "
                  f"{best.latency_ci_high_ms or 0:.3f}] ({best.placement}), accuracy "
                  f"{best.accuracy:.3f}" + (f"; ONNX Runtime {ort.latency_median_ms:.3f} ms "
                                           f"({ort.placement})" if ort else ""))
            print(f"{'compression':<34} {'variant':<28} {'ms':>8} {'95% CI':>15} "
                  f"{'vs dense':>9} {'% exp.':>7} {'sparsity':>8} {'acc':>6} {'placement':>9}")
            for row in sorted((r for r in mine if r.compression != "none"
                               and r.tuning == "none"),
                              key=lambda r: (short_label(r), r.latency_median_ms)):
                peer = same_placement(best, row.placement)
                speedup = peer / row.latency_median_ms if peer else None
                sparsity = row.sparsity or 0.0
                ideal = 1.0 / (1.0 - sparsity) if sparsity < 1 else None
                expected = speedup / ideal if speedup and ideal else None
                lo, hi = row.latency_ci_low_ms, row.latency_ci_high_ms
                ci = f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "-"
                print(f"{short_label(row):<34} {row.algorithm[:28]:<28} "
                      f"{row.latency_median_ms:>8.3f} {ci:>15} "
                      f"{'-' if speedup is None else f'{speedup:.2f}x':>9} "
                      f"{'-' if expected is None else f'{expected:.0%}':>7} "
                      f"{sparsity:>8.3f} {row.accuracy or 0:>6.3f} {row.placement or '-':>9}")
                records.append({
                    "target": target, "model": model, "compression": short_label(row),
                    "level": level_of(row), "sparsity": sparsity,
                    "variant": row.algorithm, "ms": row.latency_median_ms,
                    "ci_ms": [row.latency_ci_low_ms, row.latency_ci_high_ms],
                    "placement": row.placement, "best_dense": best.algorithm,
                    "best_dense_ms": best.latency_median_ms, "speedup": speedup,
                    "expected_fraction": expected, "accuracy": row.accuracy,
                    "dense_accuracy": best.accuracy,
                    "ort_ms": ort.latency_median_ms if ort else None})
            failed = [r for r in all_rows if r.target == target
                      and str(r.model).startswith(model) and r.status == "failed"]
            for row in failed:
                print(f"  FAILED {row.compression} {row.algorithm}: {row.error}")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=None)
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2"])
    parser.add_argument("--levels", nargs="+", type=float, default=[0.8, 0.9])
    parser.add_argument("--scopes", nargs="+", choices=["global", "layer"],
                        default=["global", "layer"],
                        help="how weight and block pruning share a level among convs: "
                             "global (the paper's), layer (every conv at the level)")
    parser.add_argument("--structured", action="store_true",
                        help="also block pruning (SIMD width, 4x1) and 2:4 N:M pruning")
    parser.add_argument("--avx2", action="store_true",
                        help="also the AVX2 code path (-mcpu haswell), on an AVX-512 host")
    parser.add_argument("--only-avx2", action="store_true",
                        help="only the AVX2 code path (a second workspace beside an AVX-512 run)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--finetune-epochs", type=int, default=2)
    parser.add_argument("--table-only", action="store_true",
                        help="print the table of an existing --workspace, run nothing")
    args = parser.parse_args()
    args.avx2 = args.avx2 or args.only_avx2

    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="dlas-sparse-"))
    workspace.mkdir(parents=True, exist_ok=True)
    log = workspace / "sparse.log"
    path = workspace / "sparse.yaml"
    path.write_text(yaml.safe_dump(config(args), sort_keys=False))
    print(f"workspace {workspace} (log: {log})", flush=True)
    if not args.table_only:
        dlas("run", str(path), "--workspace", str(workspace), "--no-progress", log=log)
    from dlas.targets.host import detect_host_cpu

    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}), batch 1, fp32, untuned")
    records = table(rows(workspace))
    (workspace / "sparse.json").write_text(json.dumps(
        {"cpu": cpu.get("model"), "mcpu": cpu.get("mcpu"), "rows": records}, indent=1))


if __name__ == "__main__":
    main()
