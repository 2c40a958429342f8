"""The `dlas` command line's arguments, one function a command (`COMMANDS`), apart from
what each command does (`dlas.cli`): a newcomer finds a flag here by its command's name.
Light to import: `--help` must not load TVM, torch or Ray."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from dlas import registry
from dlas.runner.console import default_workspace
from dlas.runner.executor_choice import EXECUTORS


def _passes(text: str) -> int:
    """`--passes N`: a whole number, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of passes, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"needs a number of passes >= 1, got {n}")
    return n


def executor_args(p: argparse.ArgumentParser) -> None:
    """Which executor runs the sweep (`dlas.runner.executor_choice`)."""
    p.add_argument("--executor", choices=list(EXECUTORS), default="local",
                   help="local: this process (default); ray: stages as tasks on a Ray "
                        "cluster (docs/cluster.md)")
    p.add_argument("--ray-address", metavar="ADDRESS",
                   help="with --executor ray: the cluster to join (e.g. 10.0.0.1:6379, "
                        "or 'auto' for the one running on this machine); default: "
                        "$RAY_ADDRESS, else a new local Ray instance")


def workspace_args(p: argparse.ArgumentParser) -> None:
    """Where the results database and the cache are."""
    p.add_argument("--workspace", default=os.environ.get("DLAS_WORKSPACE",
                                                         str(default_workspace())),
                   help="results database and cache (default ./dlas-workspace, "
                        "or $DLAS_WORKSPACE)")
    p.add_argument("--cache-dir", default=os.environ.get("DLAS_CACHE_DIR"),
                   help="artifact cache (default WORKSPACE/cache, or $DLAS_CACHE_DIR)")


def plugins_args(p: argparse.ArgumentParser) -> None:
    """`dlas plugins`'s arguments."""
    p.add_argument("--layer", choices=list(registry.LAYERS))


def plan_args(p: argparse.ArgumentParser) -> None:
    """`dlas plan`'s arguments."""
    p.add_argument("config")
    workspace_args(p)
    p.add_argument("--estimate", action="store_true",
                   help="print the expected wall time per stage and in total instead of "
                        "the grid (from this workspace's measured stage costs, else a "
                        "built-in cost model)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="also estimate the wall time on N worker machines (implies "
                        "--estimate)")
    p.add_argument("--all", action="store_true",
                   help="list every point, also when the grid has more than 200 (then a "
                        "summary is printed instead)")
    p.add_argument("--json", action="store_true",
                   help="print every point (or, with --estimate, the estimate) as JSON")
    p.add_argument("--predict", action="store_true",
                   help="with --estimate: also each point's latency predicted from this "
                        "workspace's per-layer profiles (dlas predict, docs/profile.md)")


def run_args(p: argparse.ArgumentParser) -> None:
    """`dlas run`'s arguments."""
    p.add_argument("config")
    workspace_args(p)
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failing point")
    p.add_argument("--retry-failed", action="store_true",
                   help="run only the points that failed before")
    p.add_argument("--remeasure", action="store_true",
                   help="time every measured point again in fresh timing workers, reusing "
                        "the compiled modules; every timing run is kept, and the rows' "
                        "figures and intervals cover all of them")
    p.add_argument("--passes", type=_passes, default=None, metavar="N",
                   help="timing passes: every measured point is timed N times, each pass "
                        "after the last one finished every model, and its row pools the "
                        "runs (default: the config's budgets.timing_passes; with "
                        "--remeasure, N more runs of every point)")
    p.add_argument("--remeasure-noisy", action="store_true",
                   help="time again only the points flagged noisy (busy machine or a wide "
                        "confidence interval)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--profile-layers", action="store_true",
                   help="after the sweep, profile every measured point per layer (as dlas "
                        "profile; points already profiled at their current timing are kept)")
    executor_args(p)


def profile_args(p: argparse.ArgumentParser) -> None:
    """`dlas profile`'s arguments."""
    p.add_argument("config")
    workspace_args(p)
    p.add_argument("--json", action="store_true",
                   help="print per point its latency and layers (time_us, flops, bytes, "
                        "roof_fraction) and the machine's measured limits as JSON")
    p.add_argument("--refresh", action="store_true",
                   help="profile again points that already have a stored profile")


def predict_args(p: argparse.ArgumentParser) -> None:
    """`dlas predict`'s arguments."""
    p.add_argument("config")
    workspace_args(p)
    p.add_argument("--train-workspace", metavar="DIR",
                   help="the workspace whose profiles train the predictor (default: "
                        "--workspace)")
    p.add_argument("--learner", choices=["gbdt", "linear", "flops-proxy"], default="gbdt",
                   help="per-layer learner: gradient-boosted trees (default), a linear cost "
                        "in MACs and bytes, or time proportional to MACs (the paper's proxy)")
    p.add_argument("--json", action="store_true", help="print the predictions as JSON")


def results_args(p: argparse.ArgumentParser) -> None:
    """`dlas results`'s arguments."""
    workspace_args(p)
    p.add_argument("--sweep")
    p.add_argument("--status", choices=["ok", "failed", "verification_failed", "not_runnable"])
    p.add_argument("--csv", help="write the selected rows (all columns) to this CSV file")
    p.add_argument("--json", action="store_true", help="print rows as JSON (all columns)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true",
                      help="every summary column (status ... error), cells folded to fit, "
                           "instead of the default one line a row")
    view.add_argument("--columns", metavar="A,B,C",
                      help="these columns, one line a row (any field of the results table, "
                           "e.g. status,model,latency_median_ms,layout,error)")


def report_args(p: argparse.ArgumentParser) -> None:
    """`dlas report`'s arguments."""
    workspace_args(p)
    p.add_argument("--sweep", help="only this sweep's points (default: every sweep)")
    p.add_argument("--experiment",
                   help="an experiments/ definition: its sweeps, with the paper's values "
                        "beside ours")
    p.add_argument("--out", help="output folder (default WORKSPACE/report)")


def reproduce_args(p: argparse.ArgumentParser) -> None:
    """`dlas reproduce`'s arguments."""
    p.add_argument("experiment", help="name of a file in experiments/, e.g. cifar10_cpu")
    p.add_argument("--profile", default="quick",
                   help="quick (fits a laptop; default) or full (the paper's scale)")
    workspace_args(p)
    p.add_argument("--out", help="report folder (default WORKSPACE/reports/SWEEP)")
    p.add_argument("--skip-unregistered", action="store_true",
                   help="leave out options not registered yet instead of stopping; the "
                        "report lists them")
    p.add_argument("--retry-failed", action="store_true",
                   help="run only the points that failed before")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--profile-layers", action="store_true",
                   help="profile every measured point per layer before the report, which "
                        "then shows where the time goes and the layers behind each "
                        "observation")
    executor_args(p)


def init_args(p: argparse.ArgumentParser) -> None:
    """`dlas init`'s arguments."""
    p.add_argument("path", nargs="?", default="quickstart.yaml",
                   help="where to write the starter sweep config (default ./quickstart.yaml)")
    p.add_argument("--force", action="store_true", help="replace an existing file")


#: Every command: its name, its one-line help and the function that adds its arguments,
#: in the order `dlas --help` lists them.
COMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = [
    ("init", "write a starter sweep config (the quickstart's) to edit and run", init_args),
    ("plugins", "list every option on each layer", plugins_args),
    ("plan", "print a sweep's grid (a summary above 200 points) and what is already cached",
     plan_args),
    ("run", "run a sweep (cached, resumable)", run_args),
    ("profile", "per-layer profile of every measured point of a sweep, each layer on the "
                "machine's roofline", profile_args),
    ("predict", "predict the latency of a sweep's TVM points (run or not) from the "
                "per-layer profiles measured so far", predict_args),
    ("results", "print results, optionally export CSV", results_args),
    ("report", "build the HTML + Markdown report (tables, figures, observations) from the "
               "results database", report_args),
    ("reproduce", "run a paper experiment's sweep (cached) and write its report",
     reproduce_args),
]
