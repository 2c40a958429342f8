"""`dlas` command line: plugins, plan, run, results, report, reproduce."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.markup import escape
from rich.table import Table

from dlas import registry
from dlas.cli_args import COMMANDS
from dlas.results.health import DamagedDatabaseError, check_database
from dlas.runner.console import (
    column_names,
    make_console,
    print_results,
    results_table,
)
from dlas.runner.eta import RunningEstimate
from dlas.runner.refused import ExecutorRefused
from dlas.runner.signals import INTERRUPTED, MESSAGE, sigterm_as_interrupt
from dlas.sweep.config import ConfigError, load_config
from dlas.targets.host import CPUINFO_ENV, cpuinfo_override_problem

if TYPE_CHECKING:
    from dlas.runner.sweep_executor import SweepExecutor
    from dlas.sweep.config import SweepConfig

console = make_console()


class UsageError(ValueError):
    """A command-line argument that cannot be used (exit 2, like a bad config)."""


def _folder_arg(path: Path, flag: str) -> Path:
    """`path` if it is, or can become, a folder; a file in its place is a usage error
    (otherwise mkdir fails deep inside a stage with a raw traceback)."""
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                raise UsageError(f"{flag} {path}: {part} is a file, not a folder; give a "
                                 "folder path (it is created if missing)")
            break
    return path


def _file_arg(path: Path, flag: str) -> Path:
    """`path` if a file can be written there: its folder exists and it is no folder."""
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file path, e.g. {path / 'out'}")
    if not path.parent.is_dir():
        raise UsageError(f"{flag} {path}: folder {path.parent} does not exist; create it "
                         "first or choose another path")
    return path


def _workspace(args: argparse.Namespace):  # -> Workspace (import kept lazy for fast --help)
    from dlas.runner.workspace import Workspace

    root = _folder_arg(Path(args.workspace), "--workspace")
    cache = _folder_arg(Path(args.cache_dir), "--cache-dir") if args.cache_dir else None
    if cache is None:
        _folder_arg(root / "cache", "--workspace")
    return Workspace(root, cache)


def _default_text(field: FieldInfo) -> str:
    """How `dlas plugins` shows a parameter's default: "required" when it has none, the
    value a `default_factory` makes (pydantic keeps `PydanticUndefined` as `.default`
    for those), else the default itself."""
    if field.is_required():
        return "required"
    value = field.default
    if field.default_factory is not None:
        try:
            value = field.get_default(call_default_factory=True)
        except Exception:  # noqa: BLE001 - a factory that needs validated data
            return "=(computed)"
    if isinstance(value, BaseModel):  # as a config would write it: only what is set
        return f"={value.model_dump(mode='json', exclude_defaults=True)!r}"
    return f"={value!r}"


def _schema_summary(option: registry.Option) -> str:
    parts = []
    for name, field in option.params.model_fields.items():
        ann = field.annotation
        kind = ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")
        parts.append(f"{name}: {kind} {_default_text(field)}")
    return "; ".join(parts) or "-"


def _source_parts(source: str) -> tuple[str, str]:
    """('dlas 0.1.0', "entry point 'models' = dlas.models.options") of an option's
    source; a source in another form is all short name."""
    name, sep, detail = source.partition(" (")
    return (name, detail[:-1]) if sep and detail.endswith(")") else (source, "")


def cmd_plugins(args: argparse.Namespace) -> int:
    for layer, title in registry.LAYERS.items():
        if args.layer and layer != args.layer:
            continue
        table = Table(title=f"layer {title}  (config key: {layer})", title_justify="left")
        # names stay whole; prose and parameter lists wrap (a reference, read in full)
        table.add_column("option", no_wrap=True)
        table.add_column("description", overflow="fold", ratio=3)
        table.add_column("parameters", overflow="fold", ratio=3)
        table.add_column("version", no_wrap=True)
        table.add_column("from", no_wrap=True)
        sources: dict[str, str] = {}
        for opt in registry.list_options(layer):
            name, detail = _source_parts(opt.source)
            if detail:
                sources[name] = detail
            cells = (opt.name, opt.description, _schema_summary(opt), opt.version, name)
            table.add_row(*(escape(c) for c in cells))  # "list[float]" is not rich markup
        console.print(table)
        for name, detail in sources.items():  # where each distribution registered them
            console.print(f"  {name}: {detail}", markup=False, highlight=False,
                          soft_wrap=False)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from dlas.runner import plan
    from dlas.runner.cache import Cache
    from dlas.sweep.grid import expand

    config = load_config(args.config)
    if args.predict and not (args.estimate or args.workers is not None):
        raise UsageError("--predict adds predicted latencies to --estimate: give --estimate "
                         "too (or use dlas predict CONFIG)")
    if args.estimate or args.workers is not None:
        if args.all:
            raise UsageError("--all lists the grid's points; --estimate prints the expected "
                             "wall time instead: give one of them")
        return _plan_estimate(args, config)
    excluded: list = []
    points = expand(config, excluded)
    ws = _workspace(args)
    plans = plan.plan_points(points, Cache(ws.cache_dir),
                             verify=len(points) <= plan.SUMMARY_ABOVE)
    if args.json:
        print(json.dumps(plan.as_json(config, plans, len(excluded), ws.cache_dir), indent=1))
    elif len(plans) > plan.SUMMARY_ABOVE and not args.all:
        plan.print_summary(plan.summarize(config, plans, len(excluded)), ws.cache_dir,
                           args.config, console)
    else:
        plan.print_table(config, plans, len(excluded), ws.cache_dir, console)
    return 0


def _plan_estimate(args: argparse.Namespace, config) -> int:  # noqa: ANN001 - SweepConfig
    """`dlas plan --estimate`: the sweep's expected wall time (dlas/estimate/)."""
    from dlas.estimate import estimate_sweep
    from dlas.estimate.render import as_json, print_estimate

    workers = 1 if args.workers is None else args.workers
    if workers < 1:
        raise UsageError(f"--workers {workers}: give the number of worker machines, 1 or "
                         "more (e.g. --workers 8)")
    ws = _workspace(args)
    # a grid of tens of thousands of points takes seconds: say what is going on (on a
    # terminal only; the line is gone once the estimate prints)
    with console.status(f"estimating sweep '{config.name}' (every point's stages against "
                        "the cache)...", spinner="line"):
        estimate = estimate_sweep(config, ws.cache_dir, ws.db_path, workers=workers,
                                  helpers=_compile_helpers() if workers == 1 else 0,
                                  **_machine_scales(config))
    predicted = _predicted_latencies(config, ws) if args.predict else None
    if args.json:
        out = as_json(estimate)
        if args.predict:
            from dlas.predict.run import as_json as predicted_json

            out["predicted_latency"] = None if predicted is None else predicted_json(predicted)
        print(json.dumps(out, indent=1))
    else:
        print_estimate(estimate, console)
        if predicted is not None:
            from dlas.predict.run import table

            console.print(table(predicted))
    return 0


def _predicted_latencies(config, ws):  # noqa: ANN001, ANN202 - lazy-imported types
    """`plan --estimate --predict`: the sweep's points predicted from the workspace's
    profiles (`dlas predict`), or None, said, when it has none to train on."""
    from dlas.predict.run import predict_sweep

    try:
        if not ws.db_path.exists():
            raise ValueError(f"no results database at {ws.db_path}")
        return predict_sweep(config, ws.db_path, ws.db_path)
    except ValueError as exc:
        print(f"no predicted latencies: {exc}", file=sys.stderr)
        return None


def _machine_scales(config: SweepConfig) -> dict[str, float]:
    """This machine's speed against the cost model's, as `estimate_sweep`'s keywords:
    its training MACs' (DLAS_MAC_SCALE sets it), its serial work's (DLAS_SERIAL_SCALE) and,
    when `config` fits in bfloat16 here, a bf16 training step's speedup
    (DLAS_BF16_SPEEDUP); for tests and what-if estimates of another machine; unset:
    measured here."""
    from dlas.estimate.machine_speed import (
        bf16_step_speedup,
        serial_scale,
        training_mac_scale,
    )
    from dlas.stages.train import fit_precision

    scales = {"mac_scale": _scale_from_env("DLAS_MAC_SCALE", training_mac_scale),
              "serial_scale": _scale_from_env("DLAS_SERIAL_SCALE", serial_scale)}
    if fit_precision(config.budgets) == "bfloat16":
        scales["bf16_speedup"] = _scale_from_env("DLAS_BF16_SPEEDUP", bf16_step_speedup)
    return scales


def _scale_from_env(name: str, measure: Callable[[], float]) -> float:
    import os

    given = os.environ.get(name)
    if not given:
        return measure()
    try:
        scale = float(given)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise UsageError(f"{name}={given!r}: give a positive number (1 = the cost "
                         "model's machine; unset = measure this one)")
    return scale


def _print_run_estimate(config, workspace,  # noqa: ANN001
                        helpers: int = 0) -> RunningEstimate | None:
    """One line before a run: how long it should take here (`dlas plan --estimate` has
    the breakdown); the estimate per stage, which each point's line then measures
    progress against, corrected as stages finish (`dlas.runner.eta`). Never stops a run:
    an estimate that fails is left out."""
    try:
        from dlas.estimate import estimate_sweep
        from dlas.estimate.render import duration

        est = estimate_sweep(config, workspace.cache_dir, workspace.db_path,
                             helpers=helpers, **_machine_scales(config))
    except Exception:  # noqa: BLE001 - the run matters, the estimate is a courtesy
        return None
    if not est.tasks:
        return None
    console.print(f"estimated {duration(est.total_s)} on this machine ({len(est.tasks)} "
                  "stages to compute; dlas plan --estimate for the breakdown)",
                  markup=False)
    from dlas.estimate.costmodel import pass_weights
    from dlas.stages import TIMED_STAGES

    return RunningEstimate.of(float(est.total_s),
                              [(t.stage, t.key, t.measured_s, t.builtin_s) for t in est.tasks],
                              set(TIMED_STAGES), pass_weights(config.budgets.timing_passes))


def _executor(args: argparse.Namespace, workspace: Any) -> SweepExecutor:
    """The executor --executor and --ray-address name (exit 2 with what to do where it
    cannot run)."""
    from dlas.runner.executor_choice import make_executor

    try:
        return make_executor(args.executor, workspace, address=args.ray_address,
                             progress=not args.no_progress)
    except ExecutorRefused as exc:
        raise UsageError(str(exc)) from exc


def cmd_run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    workspace = _workspace(args)
    check_database(workspace.db_path)  # before any work: the rows could not be stored
    helpers = _compile_helpers()
    runner = _executor(args, workspace)
    runner.console.config_path = args.config  # the summary names the commands in full
    runner.console.findings = _observations_decided(runner.workspace.db_path, config.name)
    eta = _print_run_estimate(config, runner.workspace,
                              helpers if args.executor == "local" else 0)
    runner.console.eta = eta
    runner.console.estimated_s = eta.total_s if eta is not None else None
    if args.remeasure and args.remeasure_noisy:
        raise UsageError("--remeasure times every point again; --remeasure-noisy only the "
                         "noisy ones: give one of them")
    from dlas.runner.passes import ALL, NOISY, run_in_passes

    remeasure = ALL if args.remeasure else NOISY if args.remeasure_noisy else None
    try:
        report = run_in_passes(runner, config, fail_fast=args.fail_fast,
                               retry_failed=args.retry_failed, remeasure=remeasure,
                               passes=args.passes)
    except ExecutorRefused as exc:  # e.g. the cluster refused this workspace's token
        raise UsageError(str(exc)) from exc
    if report.interrupted:
        return INTERRUPTED
    bad = report.failed + report.verification_failed
    if args.profile_layers and not (bad and args.fail_fast):
        profile_layers(config, runner.workspace)
    return 1 if (bad and args.fail_fast) else 0


def _compile_helpers() -> int:
    """DLAS_COMPILE_AHEAD checked before any work (`dlas.runner.compile_ahead`)."""
    from dlas.runner.compile_ahead import helper_count

    try:
        return helper_count()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _observations_decided(db_path: Path, sweep: str) -> Callable[[int], list[str]]:
    """The run's ending names the paper's observations its rows decided."""
    def lines(width: int) -> list[str]:
        from dlas.report.observations.decided import sweep_decided_lines

        return sweep_decided_lines(db_path, sweep, width)
    return lines


def profile_layers(config: Any, workspace: Any) -> None:
    """`--profile-layers`: every measured point of the sweep without a current profile
    gets one (`dlas profile`); a point that cannot be profiled is said, and the sweep's
    exit status stays the run's."""
    from dlas.runner.profiling import profile_sweep

    result = profile_sweep(config, workspace,
                           note=lambda text: console.print(text, markup=False))
    failed = [item for item in result.points if item.profile is None]
    console.print(f"per-layer profiles: {len(result.points) - len(failed)} of "
                  f"{len(result.points)} measured point(s) (dlas profile "
                  "shows them; dlas report charts them)")
    for item in failed:
        console.print(f"  not profiled: {item.point.describe()}: {item.error}", markup=False)


def cmd_results(args: argparse.Namespace) -> int:
    from dlas.results.store import ResultStore

    columns = _columns_arg(args.columns)
    ws = _workspace(args)
    if not ws.db_path.exists():
        console.print(f"no results database at {ws.db_path}; run a sweep first "
                      "(dlas run CONFIG) or pass --workspace")
        return 1
    with ResultStore(ws.db_path) as store:
        rows = store.rows(sweep=args.sweep, status=args.status)
        if args.csv:
            n = store.export_csv(_file_arg(Path(args.csv), "--csv"), rows)
            console.print(f"wrote {n} rows to {args.csv}")
        if args.json:
            print(json.dumps([r.model_dump() for r in rows], indent=1, default=str))
            return 0
    title = f"results in {ws.db_path} ({len(rows)} rows)"
    if args.wide:
        console.print(results_table(rows, title=title))
    else:
        print_results(console, rows, title, columns)
    return 0


def _columns_arg(text: str | None) -> list[str] | None:
    """`--columns a,b,c`: the names, each a results column (else a usage error that
    lists them all)."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = column_names()
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        said = f"unknown column(s) {', '.join(unknown)}" if unknown else "no column named"
        raise UsageError(f"--columns: {said}; the columns are: {', '.join(valid)}")
    return names


def cmd_profile(args: argparse.Namespace) -> int:
    from dlas.runner.profile_console import as_json, limits_line, point_table
    from dlas.runner.profiling import profile_sweep

    config = load_config(args.config)
    ws = _workspace(args)
    if not ws.db_path.exists():
        console.print(f"no results database at {ws.db_path}; run the sweep first (dlas run "
                      f"{args.config}) or pass --workspace")
        return 1
    say = (lambda text: print(text, file=sys.stderr)) if args.json else \
        (lambda text: console.print(text, markup=False))
    result = profile_sweep(config, ws, refresh=args.refresh, note=say)
    if args.json:
        print(json.dumps(as_json(result), indent=1, default=str))
    else:
        shown: list[dict[str, Any]] = []
        for item in result.points:
            if item.limits is not None and item.limits not in shown:
                shown.append(item.limits)
                console.print(limits_line(item.limits), markup=False)
            if item.profile is not None:
                console.print(point_table(item, console.width))
            else:
                console.print(f"{item.point.describe()}: not profiled ({item.error})", markup=False)
    if result.unmeasured:
        say(f"{result.unmeasured} point(s) of the sweep have no measured row (not run, "
            "failed or not runnable): not profiled")
    return 1 if any(item.profile is None for item in result.points) else 0


def cmd_predict(args: argparse.Namespace) -> int:
    from dlas.predict.run import as_json, predict_sweep, table

    config = load_config(args.config)
    ws = _workspace(args)
    train_db = Path(args.train_workspace) / "results.db" if args.train_workspace else ws.db_path
    if not train_db.exists():
        raise UsageError(f"no results database at {train_db} to train on: profile a measured "
                         "sweep first (dlas run CONFIG; dlas profile CONFIG), or pass "
                         "--train-workspace")
    try:
        result = predict_sweep(config, train_db, ws.db_path, learner=args.learner)
    except ValueError as exc:  # nothing profiled to train on
        raise UsageError(f"{exc} (training database: {train_db})") from exc
    if args.json:
        print(json.dumps(as_json(result), indent=1))
    else:
        console.print(table(result))
        for item in result.points:
            warnings = item.prediction.warnings if item.prediction else []
            if warnings:
                more = f" (and {len(warnings) - 1} more)" if len(warnings) > 1 else ""
                console.print(f"  {item.point.describe()}: {warnings[0]}{more}", markup=False)
    return 0


def _print_report_files(files) -> None:  # noqa: ANN001 - dlas.report.ReportFiles
    console.print(f"report written: {files.html}")
    console.print(f"                {files.markdown} (+ {len(files.figures)} figures in "
                  f"{files.markdown.parent / 'figures'})")


def cmd_report(args: argparse.Namespace) -> int:
    from dlas.report import build_report
    from dlas.report.data import sweep_names
    from dlas.report.experiments import current_point_keys, load_experiment

    ws = _workspace(args)
    if not ws.db_path.exists():
        console.print(f"no results database at {ws.db_path}; run a sweep first "
                      "(dlas run CONFIG or dlas reproduce EXPERIMENT) or pass --workspace")
        return 1
    experiment = load_experiment(args.experiment) if args.experiment else None
    known = sweep_names(ws.db_path)
    if args.sweep and args.sweep not in known:
        console.print(f"error: no sweep '{args.sweep}' in {ws.db_path}; its sweeps: "
                      f"{', '.join(known) or '(none)'}", markup=False, style="red")
        return 2
    sweeps = [args.sweep] if args.sweep else None
    out = _folder_arg(Path(args.out), "--out") if args.out else ws.root / "report"
    keys = current_point_keys(experiment) if experiment else None
    files = build_report(ws.db_path, out, sweeps=sweeps, experiment=experiment,
                         point_keys=keys)
    if not sum(files.counts.values()):
        console.print(f"[yellow]warning[/]: no results of experiment {args.experiment} "
                      f"(sweeps {', '.join(experiment.sweep_names) if experiment else '-'}) "
                      f"in {ws.db_path}; its sweeps: {', '.join(known) or '(none)'}")
    _print_report_files(files)
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    from dlas.report.reproduce import reproduce

    workspace = _workspace(args)
    check_database(workspace.db_path)  # before any work: the rows could not be stored
    executor = _executor(args, workspace)
    try:
        result = reproduce(args.experiment, args.profile, workspace, executor=executor,
                           out=_folder_arg(Path(args.out), "--out") if args.out else None,
                           skip_unregistered=args.skip_unregistered,
                           retry_failed=args.retry_failed,
                           profile_layers=profile_layers if args.profile_layers else None)
    except ExecutorRefused as exc:
        raise UsageError(str(exc)) from exc
    console.print(f"sweep config: {result.sweep_file}")
    if result.skipped:
        console.print("[yellow]left out (not registered)[/]: " + escape(
            "; ".join(f"{layer}: {', '.join(n)}" for layer, n in result.skipped.items())))
    _print_report_files(result.report)
    return INTERRUPTED if result.run.interrupted else 0


def cmd_init(args: argparse.Namespace) -> int:
    """Copy the quickstart's config where the user wants to edit it: an installed wheel
    has no configs/ folder to start from."""
    from dlas.resources import starter_config

    target = Path(args.path)
    if target.is_dir():
        target = target / starter_config().name
    if target.exists() and not args.force:
        raise UsageError(f"{target} exists; give another path, or --force to replace it")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent} is not a folder; create it first, or give "
                         "another path")
    target.write_text(starter_config().read_text())
    console.print(f"wrote {target} (the quickstart's sweep: two models, dense and pruned, "
                  "every algorithm, both baselines); edit it, then: dlas run "
                  f"{target}", markup=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `dlas` parser: each command's arguments (`dlas.cli_args.COMMANDS`) and the
    function that runs it."""
    parser = argparse.ArgumentParser(prog="dlas", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    handlers = {"init": cmd_init, "plugins": cmd_plugins, "plan": cmd_plan, "run": cmd_run,
                "profile": cmd_profile, "predict": cmd_predict, "results": cmd_results,
                "report": cmd_report, "reproduce": cmd_reproduce}
    for name, help_text, add_args in COMMANDS:
        p = sub.add_parser(name, help=help_text)
        add_args(p)
        p.set_defaults(fn=handlers[name])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cpuinfo_problem = cpuinfo_override_problem()
    if cpuinfo_problem:
        console.print(f"error: {cpuinfo_problem}", markup=False, style="red")
        return 2
    if os.environ.get(CPUINFO_ENV) and getattr(args, "fn", None) in (cmd_run, cmd_plan,
                                                                  cmd_reproduce):
        print(f"note: {CPUINFO_ENV}={os.environ[CPUINFO_ENV]}: code paths follow that CPU's "
              "flags; timings are this machine's, and rows say so", file=sys.stderr)
    # SIGTERM (batch schedulers, kill) stops any command the way Ctrl-C does
    with sigterm_as_interrupt() as interrupts:
        try:
            code = args.fn(args)
        except (ConfigError, UsageError, registry.PluginLoadError,
                DamagedDatabaseError) as exc:
            console.print(f"error: {exc}", markup=False, style="red")
            code = 2
        except KeyboardInterrupt:  # outside a sweep's own handling (which says more)
            console.print(MESSAGE, markup=False, style="yellow")
            code = INTERRUPTED
        if code == INTERRUPTED:
            if interrupts.received == "SIGTERM":
                console.print("(stopped by SIGTERM, as Ctrl-C would)", markup=False)
            stopped = interrupts.stop_children()
            if stopped:
                console.print(f"stopped {len(stopped)} leftover child process(es) "
                              f"({', '.join(map(str, stopped))})", markup=False)
    return code


def entry() -> None:
    """The `dlas` console script: `main`, then an exit without the interpreter's
    teardown (`dlas.fast_exit`: seconds after a sweep)."""
    from dlas.fast_exit import exit_now

    exit_now(main())


if __name__ == "__main__":
    entry()
