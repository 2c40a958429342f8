"""The quickstart's tuned point with and without the search's genetic iterations.

A tuning session ranked by chance that gives every task one batch draws it from the
sampled population without MetaSchedule's genetic iterations (`breeds` in
`dlas/tuning/metaschedule/search_strategy.py`, docs/tuning.md). This benchmark runs the
quickstart's tuned point (ResNet18-w0.5 on 16x16 digits, GEMM, MetaSchedule with its 64
trials) through `dlas run`'s own path, alternately with breeding forced on (the code
before the change) and as dlas decides, each in a fresh workspace and tuning database
with the same seed; the model is trained once and its cache copied in. Printed per run:
the compile stage's seconds (tuning included), the tuning seconds, and the tuned model's
row as `dlas results` has it (median, 95% interval, placement). Then the medians per
side and their ratio.

    python benchmarks/tuned_point_search.py [--repeats 2] [--keep DIR]

About 3 minutes per pair of runs on a 2-vCPU Zen 3. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from dlas.runner.console import RunConsole
from dlas.runner.passes import run_in_passes
from dlas.runner.runner import Runner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import SweepConfig, parse_config
from dlas.tuning.metaschedule import search_strategy, tune

ROOT = Path(__file__).resolve().parents[1]
#: Stages of the point that do not depend on the search: computed once, copied in.
SHARED_STAGES = ("train", "compress", "import", "onnx-exports")


def tuned_point_config() -> SweepConfig:
    """The quickstart with only its tuned point: ResNet18, dense, GEMM, MetaSchedule."""
    raw = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    raw["models"] = [m for m in raw["models"] if m["name"] == "resnet18"]
    raw["compression"] = ["none"]
    raw["algorithms"] = ["gemm"]
    raw["tuning"] = [t for t in raw["tuning"]
                     if isinstance(t, dict) and t["name"] == "metaschedule"]
    raw.pop("exclude", None)
    raw["budgets"]["timing_passes"] = 1
    return parse_config(yaml.safe_dump(raw), source="the quickstart's tuned point")


def run_once(config: SweepConfig, root: Path, breed: bool | None) -> dict[str, Any]:
    """One run in `root`; `breed` True forces the genetic iterations, None lets dlas
    decide. The point's row."""
    real = search_strategy.breeds
    if breed:
        tune.breeds = lambda *args: True  # type: ignore[assignment]
    try:
        quiet = RunConsole(progress=False, console=Console(file=io.StringIO(), width=200))
        report = run_in_passes(Runner(Workspace(root), progress=False, console=quiet), config)
    finally:
        tune.breeds = real  # type: ignore[assignment]
    (row,) = [r for r in report.rows if r.tuning and r.tuning.startswith("metaschedule")]
    return {"compile_s": report.seconds.get("compile", 0.0), "tuning_s": row.tuning_s,
            "ms": row.latency_median_ms, "low": row.latency_ci_low_ms,
            "high": row.latency_ci_high_ms, "placement": row.placement,
            "status": row.status}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs per side")
    parser.add_argument("--keep", type=Path, help="keep the workspaces here")
    args = parser.parse_args()
    config = tuned_point_config()
    base = args.keep or Path(tempfile.mkdtemp(prefix="dlas-tuned-search-"))
    base.mkdir(parents=True, exist_ok=True)
    shared = base / "shared"
    print("training the model once (its cache is copied into every run) ...", flush=True)
    run_once(config, shared, breed=None)
    sides: dict[str, list[dict[str, Any]]] = {"breeding (before)": [], "as dlas decides": []}
    for i in range(args.repeats):
        for name, breed in (("breeding (before)", True), ("as dlas decides", None)):
            root = base / f"{'breed' if breed else 'dlas'}-{i}"
            shutil.rmtree(root, ignore_errors=True)
            for stage in SHARED_STAGES:
                if (shared / "cache" / stage).exists():
                    shutil.copytree(shared / "cache" / stage, root / "cache" / stage)
            got = run_once(config, root, breed)
            sides[name].append(got)
            print(f"{name:18s} run {i + 1}: compile {got['compile_s']:5.1f} s, tuning "
                  f"{got['tuning_s'] or 0:5.1f} s, model {got['ms']:.3f} ms "
                  f"[{got['low']:.3f}, {got['high']:.3f}] ({got['placement']}, "
                  f"{got['status']})", flush=True)
    print()
    (before, now) = sides.values()
    compile_s = [statistics.median(r["compile_s"] for r in runs) for runs in (before, now)]
    print(f"median compile: breeding {compile_s[0]:.1f} s, as dlas decides "
          f"{compile_s[1]:.1f} s (x{compile_s[1] / compile_s[0]:.2f})")
    # the models' times compare only within one vCPU placement (docs/timing.md)
    for placement in sorted({r["placement"] for r in before} & {r["placement"] for r in now}):
        ms = [[r["ms"] for r in runs if r["placement"] == placement] for runs in (before, now)]
        print(f"model in {placement} placement: breeding {statistics.median(ms[0]):.3f} ms "
              f"(n={len(ms[0])}, {min(ms[0]):.3f}-{max(ms[0]):.3f}), as dlas decides "
              f"{statistics.median(ms[1]):.3f} ms (n={len(ms[1])}, {min(ms[1]):.3f}-"
              f"{max(ms[1]):.3f}): x{statistics.median(ms[1]) / statistics.median(ms[0]):.2f}")
    if not {r["placement"] for r in before} & {r["placement"] for r in now}:
        print("model: no placement in common between the sides; not comparable")
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
