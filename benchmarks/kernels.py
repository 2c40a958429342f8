"""Kernels at the machine's limit: every algorithm in every layout, untuned and tuned,
beside ONNX Runtime and the paper's NCHW path, all from one dlas workspace.

Everything is measured by `dlas run` (the product's own timing path: fresh timing
workers, interleaved rounds, placement recorded), so a figure here and a sweep row mean
the same thing. Three phases, one workspace:

1. untuned: the models (width 0.5, digits, fp32, batch 1, the host's threads) with
   direct, GEMM and spatial pack in NCHW, NHWC and NCHWc, and ONNX Runtime;
2. tuned: per model, the fastest untuned variant tuned by MetaSchedule with
   `--trials` (time-share allocation), and for ResNet18 also `--resnet-trials`;
3. `dlas profile` of the tuned points: each conv's share of the roofline;
4. with `--int8`: the models quantized to int8 (ONNX Runtime's static quantization),
   direct, GEMM and spatial pack in NCHW and in NCHWc, beside ONNX Runtime's int8. The
   NCHWc convs run on the CPU's integer dot product (`dlas.algorithms.dot_conv`,
   `dlas.algorithms.int8_dot`: `vpdpbusd` with AVX512-VNNI,
   `vpmaddubsw` with AVX2), and the table says which.

Printed per model: every variant's median, its ratio to ONNX Runtime and to the same
algorithm in NCHW (the paper's layout), compile seconds, and the placement the row was
timed in (ratios are only meaningful between rows of one placement, docs/timing.md);
then the tuned rows with their tuning seconds, and the tuned convs' median roof
fraction. A JSON copy goes to WORKSPACE/kernels.json.

    python benchmarks/kernels.py [--workspace DIR] [--models resnet18 mobilenetv2 vgg16]
                                 [--trials 256] [--resnet-trials 128] [--skip-tuning]
                                 [--int8 | --int8-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ["direct", "gemm", "spatial_pack"]
LAYOUTS = ["NCHW", "NHWC", "NCHWc"]
BUDGETS = {"epochs": 1, "batch_size": 64, "measure_repeat": 150, "timing_passes": 1,
           "verify_samples": 16, "seed": 0}


def dlas(*args: str, log: Path) -> str:
    """`dlas ARGS` in a subprocess (as a user runs it); its output appended to `log`."""
    cmd = [sys.executable, "-m", "dlas.cli", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n{done.stdout}\n{done.stderr}\n")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}); see {log}")
    return done.stdout


def variant(algorithm: str, layout: str) -> dict[str, Any] | str:
    return algorithm if layout == "NCHW" else {"name": algorithm,
                                               "params": {"layout": layout}}


def label(algorithm: str, layout: str) -> str:
    return algorithm if layout == "NCHW" else f"{algorithm}(layout={layout})"


def config(name: str, models: list[str], algorithms: list[Any], tuning: list[Any],
           exclude: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out = {"name": name, "datasets": ["digits"],
           "models": [{"name": m, "params": {"width_multiplier": 0.5}} for m in models],
           "compression": ["none"], "algorithms": algorithms, "tuning": tuning,
           "targets": ["host"], "budgets": BUDGETS}
    if exclude:
        out["exclude"] = exclude
    return out


def write(cfg: dict[str, Any], workspace: Path) -> Path:
    path = workspace / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def rows(workspace: Path, sweep: str) -> list[Any]:
    from dlas.results.store import ResultStore

    with ResultStore(workspace / "results.db") as store:
        return store.rows(sweep=sweep)


def model_of(row: Any) -> str:
    return str(row.model).split("(")[0]


def tuned_trials(row: Any) -> int | None:
    config = row.config or {}
    params = config.get("choices", {}).get("tuning", {}).get("params", {})
    return params.get("trials")


def untuned_table(table: list[Any], models: list[str]) -> tuple[list[dict], dict[str, str]]:
    """Print phase 1; return its records and each model's fastest untuned variant."""
    records: list[dict] = []
    best: dict[str, str] = {}
    print(f"\n{'model':<12} {'variant':<28} {'ms':>8} {'vs ORT':>7} {'vs NCHW':>8} "
          f"{'compile s':>9} {'placement':>9}")
    for model in models:
        mine = [r for r in table if model_of(r) == model]
        ort = next((r for r in mine if r.tuning == "onnxruntime" and r.status == "ok"), None)
        ort_ms = ort.latency_median_ms if ort else None
        if ort is not None:
            print(f"{model:<12} {'ONNX Runtime':<28} {ort_ms:>8.3f} {'':>7} {'':>8} {'':>9} "
                  f"{ort.placement or '-':>9}")
        nchw = {r.algorithm: r.latency_median_ms for r in mine
                if r.tuning == "none" and r.status == "ok" and "layout" not in r.algorithm}
        fastest: tuple[float, str] | None = None
        for algorithm in ALGORITHMS:
            for layout in LAYOUTS:
                row = next((r for r in mine if r.algorithm == label(algorithm, layout)
                            and r.tuning == "none"), None)
                if row is None:
                    continue
                if row.status != "ok":
                    print(f"{model:<12} {row.algorithm:<28} {row.status}: {row.error}")
                    continue
                ms = row.latency_median_ms
                vs_ort = ms / ort_ms if ort_ms else None
                vs_nchw = ms / nchw[algorithm] if nchw.get(algorithm) else None
                print(f"{model:<12} {row.algorithm:<28} {ms:>8.3f} "
                      f"{_ratio(vs_ort):>7} {_ratio(vs_nchw):>8} {row.compile_s or 0:>9.2f} "
                      f"{row.placement or '-':>9}")
                records.append({"model": model, "variant": row.algorithm, "tuning": "none",
                                "ms": ms, "vs_ort": vs_ort, "vs_nchw": vs_nchw,
                                "compile_s": row.compile_s, "placement": row.placement,
                                "ort_ms": ort_ms})
                if fastest is None or ms < fastest[0]:
                    fastest = (ms, f"{algorithm}:{layout}")
        if fastest is not None:
            best[model] = fastest[1]
            ratio = fastest[0] / ort_ms if ort_ms else float("nan")
            print(f"{model:<12} best untuned: {best[model]} at {ratio:.2f}x ONNX Runtime "
                  f"(target <= 1.5x)")
    return records, best


def int8_table(table: list[Any], models: list[str]) -> list[dict]:
    """Print phase 4: int8 per algorithm and layout against ONNX Runtime's int8 and the
    same algorithm in NCHW."""
    import tvm

    from dlas.targets.host import host_target
    from dlas.tir.schedule_helpers import target_features

    features = target_features(tvm.target.Target(host_target()))
    kernel = ("vpdpbusd (AVX512-VNNI, NCHW16c)" if "avx512vnni" in features
              else "vpmaddubsw + vpmaddwd (AVX2, NCHW8c, 7-bit weights)" if "avx2" in features
              else "the plain int8 path (neither VNNI nor AVX2)")
    print(f"\nint8, NCHWc convs on {kernel}")
    print(f"{'model':<12} {'variant':<28} {'ms':>8} {'vs ORT':>7} {'vs NCHW':>8} "
          f"{'placement':>9}")
    records: list[dict] = []
    for model in models:
        mine = [r for r in table if model_of(r) == model and r.status == "ok"]
        ort = next((r for r in mine if r.tuning == "onnxruntime"), None)
        nchw = {r.algorithm: r.latency_median_ms for r in mine
                if r.tuning == "none" and "layout" not in r.algorithm}
        if ort is not None:
            print(f"{model:<12} {'ONNX Runtime int8':<28} {ort.latency_median_ms:>8.3f} "
                  f"{'':>7} {'':>8} {ort.placement or '-':>9}")
        for row in (r for r in mine if r.tuning == "none"):
            ms = row.latency_median_ms
            vs_ort = ms / ort.latency_median_ms if ort else None
            base = nchw.get(row.algorithm.split("(")[0])
            vs_nchw = ms / base if base else None
            print(f"{model:<12} {row.algorithm:<28} {ms:>8.3f} {_ratio(vs_ort):>7} "
                  f"{_ratio(vs_nchw):>8} {row.placement or '-':>9}")
            records.append({"model": model, "variant": row.algorithm, "ms": ms,
                            "vs_ort": vs_ort, "vs_nchw": vs_nchw, "kernel": kernel,
                            "placement": row.placement})
        missing = [r for r in table if model_of(r) == model and r.status != "ok"]
        for row in missing:
            print(f"{model:<12} {row.algorithm:<28} {row.status}: {row.error}")
    return records


def same_placement(row: Any, placement: str | None) -> float | None:
    """`row`'s median comparable with a timing taken in `placement` (the product's rule,
    `dlas.measure.placement.comparable`), else its median in `placement` (a row pooled
    over invocations keeps each placement's), or None where it has none: a ratio of two
    rows means something only within one placement (docs/timing.md)."""
    from dlas.measure.placement import comparable

    if comparable(row.placement, placement):
        return row.latency_median_ms
    there = (row.latency_by_placement or {}).get(placement or "")
    return there.get("median_ms") if there else None


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=None)
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenetv2", "vgg16"])
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--resnet-trials", type=int, default=128)
    parser.add_argument("--skip-tuning", action="store_true")
    parser.add_argument("--int8", action="store_true",
                        help="also int8: each algorithm in NCHW and NCHWc against ONNX "
                             "Runtime's int8")
    parser.add_argument("--int8-only", action="store_true", help="phase 4 alone")
    args = parser.parse_args()

    from dlas.targets.host import detect_host_cpu

    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="dlas-kernels-"))
    workspace.mkdir(parents=True, exist_ok=True)
    log = workspace / "kernels.log"
    ws = ["--workspace", str(workspace), "--no-progress"]
    cpu = detect_host_cpu()
    print(f"cpu: {cpu.get('model')} (mcpu {cpu.get('mcpu')}, {cpu.get('cores')} cores); "
          f"width 0.5, digits, fp32, batch 1; workspace {workspace}")

    result: dict[str, Any] = {"cpu": cpu.get("model"), "mcpu": cpu.get("mcpu")}
    if not args.int8_only:
        result.update(untuned_and_tuned(args, workspace, log, ws))
    if args.int8 or args.int8_only:
        int8 = config("kernels-int8", args.models,
                      [variant(a, layout) for a in ALGORITHMS for layout in ("NCHW", "NCHWc")],
                      ["none", "onnxruntime"])
        int8["compression"] = ["int8"]
        dlas("run", str(write(int8, workspace)), *ws, log=log)
        result["int8"] = int8_table(rows(workspace, int8["name"]), args.models)
    (workspace / "kernels.json").write_text(json.dumps(result, indent=1))
    print(f"\nwritten: {workspace / 'kernels.json'}; dlas's output: {log}")


def untuned_and_tuned(args: argparse.Namespace, workspace: Path, log: Path,
                      ws: list[str]) -> dict[str, Any]:
    """Phases 1-3; their records."""
    untuned = config("kernels-untuned", args.models,
                     [variant(a, layout) for a in ALGORITHMS for layout in LAYOUTS],
                     ["none", "onnxruntime"])
    dlas("run", str(write(untuned, workspace)), *ws, log=log)
    records, best = untuned_table(rows(workspace, untuned["name"]), args.models)
    result: dict[str, Any] = {"untuned": records, "best_untuned": best, "tuned": []}
    if not args.skip_tuning:
        result["tuned"] = tune(args, workspace, best, log, ws)
    return result


def tuning_params(trials: int) -> dict[str, Any]:
    """MetaSchedule with `trials` shared by each conv task's share of the model's time
    (the default allocation), small search rounds for a 2-core machine."""
    return {"trials": trials, "trials_per_task": trials, "trials_per_iter": 32,
            "population": 128, "early_stopping": None, "tasks": "convs"}


def tuning_label(trials: int) -> str:
    from dlas import registry

    registry.load_plugins()
    option = registry.get("tuning", "metaschedule")
    return registry.choice_label("metaschedule", option.parse_params(tuning_params(trials)))


def tune(args: argparse.Namespace, workspace: Path, best: dict[str, str], log: Path,
         ws: list[str]) -> list[dict]:
    """Phase 2 and 3: each model's fastest untuned variant tuned, then profiled."""
    trials = {m: [args.trials] + ([args.resnet_trials] if m == "resnet18" else [])
              for m in best}
    budgets = sorted({n for ns in trials.values() for n in ns})
    tuning = [{"name": "metaschedule", "params": tuning_params(n)} for n in budgets]
    algorithms = sorted({best[m] for m in best})
    cfg = config("kernels-tuned", sorted(best),
                 [variant(*v.split(":")) for v in algorithms],
                 tuning + ["onnxruntime", "pytorch"])
    # each model tunes only its own fastest variant, ResNet18 at both budgets (rules
    # name a parameter setting by its label)
    cfg["exclude"] = [
        {"models": m, "algorithms": label(*v.split(":"))}
        for m in best for v in algorithms if v != best[m]] + [
        {"models": m, "tuning": tuning_label(n)}
        for m in best for n in sorted(set(budgets) - set(trials[m]))]
    path = write(cfg, workspace)
    dlas("run", str(path), *ws, log=log)
    # The baselines' rows were timed in phase 1, minutes earlier and perhaps in another
    # placement: time the tuned rows and the baselines once more, interleaved in one group,
    # so each tuned row has ONNX Runtime beside it in its own placement (`same_placement`).
    dlas("run", str(path), "--remeasure", *ws, log=log)
    profile = json.loads(dlas("profile", str(path), "--json", *ws[:2], log=log))
    roofs = {(p["model"], p["algorithm"], p["tuning"]): p for p in profile["points"]}
    table = rows(workspace, cfg["name"])
    print(f"\n{'model':<12} {'variant':<28} {'trials':>6} {'ms':>8} {'vs ORT':>7} "
          f"{'tuning s':>8} {'conv roof':>9} {'placement':>9}")
    out = []
    for model in sorted(best):
        mine = [r for r in table if model_of(r) == model]
        ort = next((r for r in mine if r.tuning == "onnxruntime" and r.status == "ok"), None)
        for row in sorted((r for r in mine if r.tuning.startswith("metaschedule")),
                          key=lambda r: tuned_trials(r) or 0):
            if row.status != "ok":
                print(f"{model:<12} {row.algorithm:<28} {row.status}: {row.error}")
                continue
            ms = row.latency_median_ms
            ort_ms = same_placement(ort, row.placement) if ort else None
            vs_ort = ms / ort_ms if ort_ms else None
            point = roofs.get((row.model, row.algorithm, row.tuning))
            fractions = [lay["roof_fraction"] for lay in (point or {}).get("layers", [])
                         if lay.get("op") == "conv2d" and lay.get("roof_fraction")]
            roof = statistics.median(fractions) if fractions else None
            print(f"{model:<12} {row.algorithm:<28} {tuned_trials(row) or 0:>6} {ms:>8.3f} "
                  f"{_ratio(vs_ort):>7} {row.tuning_s or 0:>8.0f} "
                  f"{'-' if roof is None else f'{roof:.2f}':>9} {row.placement or '-':>9}")
            out.append({"model": model, "variant": row.algorithm,
                        "trials": tuned_trials(row), "ms": ms, "vs_ort": vs_ort,
                        "ort_ms": ort_ms,
                        "tuning_s": row.tuning_s, "conv_roof_fraction_median": roof,
                        "placement": row.placement})
    accounting(profile["points"])
    return out


def accounting(points: list[dict]) -> None:
    """Per profiled point: do its layers and the time outside them (`outside_us`) add up
    to its latency? (issue 27: within 10% for every runtime)."""
    print(f"\n{'model':<12} {'runtime / variant':<40} {'latency ms':>10} {'layers ms':>9} "
          f"{'outside ms':>10} {'accounted':>9}")
    for p in sorted(points, key=lambda p: (p["model"], p["algorithm"], p["tuning"])):
        if p.get("error") or p.get("outside_us") is None:
            continue
        what = f"{p['runtime']} {p['algorithm']} {p['tuning'][:20]}"
        model = str(p["model"]).split("(")[0]
        print(f"{model:<12} {what[:40]:<40} "
              f"{p['latency_median_ms']:>10.3f} {p['layers_sum_ms']:>9.3f} "
              f"{p['outside_us'] / 1e3:>10.3f} {p['accounted']:>9.2f}")


if __name__ == "__main__":
    main()
