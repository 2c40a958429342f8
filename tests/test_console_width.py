"""Console output that fits the terminal: `dlas results`, `plan`, `plugins` and `profile`
tables one line a row, labels shortened with a legend, and the study summary at the end
of a run in 100 columns. Synthetic rows only: nothing runs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from dlas import cli
from dlas.results.row import ResultRow
from dlas.results.store import SUMMARY_COLUMNS, ResultStore
from dlas.runner.console import (
    BRIEF_COLUMNS,
    RunConsole,
    make_console,
    print_results,
    results_table,
)
from dlas.runner.fit import Column, fit
from dlas.runner.labels import legend_lines, short_labels, split_label
from dlas.runner.summary import more_line, study_lines
from dlas.runner.workspace import RunReport

REPO = Path(__file__).resolve().parents[1]
MODEL = "resnet18(width_multiplier=0.5)"
PRUNED = "weight_pruning(level=0.8,levels=[0.5, 0.8])"
TUNED = ("metaschedule(early_stopping=None,population=64,tasks=convs,trials=64,"
         "trials_per_iter=32,trials_per_task=32)")
REASON = ("algorithms 'direct_csr': CSR needs a compression that leaves zero weights "
          "(tagged 'sparse', e.g. weight_pruning); 'none' leaves none")


def _row(n: int, algorithm: str = "direct", tuning: str = "none", *, model: str = MODEL,
         compression: str = "none", ms: float | None = 10.0, **kw: object) -> ResultRow:
    backend = tuning if tuning in ("onnxruntime", "pytorch") else "tvm"
    timing = {} if ms is None else {"latency_median_ms": ms, "latency_ci_low_ms": ms * 0.99,
                                    "latency_ci_high_ms": ms * 1.01,
                                    "next_run_low_ms": ms * 0.9, "next_run_high_ms": ms * 1.1,
                                    "next_run_drift": 0.0953,
                                    "next_run_basis": "prior, 0 of 30 pairs measured here"}
    fields: dict = {"point_key": f"p{n}", "dataset": "digits", "model": model,
                    "compression": compression, "algorithm": algorithm, "tuning": tuning,
                    "target": "host", "backend": backend, "accuracy": 0.98,
                    "dense_accuracy": 0.98, **timing}
    fields.update(kw)
    return ResultRow(**fields)


def study_rows() -> list[ResultRow]:
    """Two models: resnet18 dense (TVM direct, gemm, gemm tuned, NCHWc; ORT, PyTorch) and
    pruned (direct_csr, ORT), mobilenetv2 (failed, not runnable, one noisy ok)."""
    return [
        _row(1, "direct", ms=10.0),
        _row(2, "gemm", ms=8.0),
        _row(3, "gemm", TUNED, ms=4.0),
        _row(4, "direct(layout=NCHWc)", ms=6.0),
        _row(5, "onnxruntime", "onnxruntime", ms=5.0),
        _row(6, "pytorch", "pytorch", ms=9.0),
        _row(7, "direct_csr", "none", compression=PRUNED, ms=3.0, accuracy=0.97),
        _row(8, "onnxruntime", "onnxruntime", compression=PRUNED, ms=4.5, accuracy=0.97),
        _row(9, "direct_csr", model="mobilenetv2(width_multiplier=0.5)", ms=None,
             status="not_runnable", accuracy=None, error=REASON),
        _row(10, "gemm", model="mobilenetv2(width_multiplier=0.5)", ms=None,
             status="failed", accuracy=None, error_stage="compile",
             error="TVMError: " + "a very long message " * 12 + "\nsecond line"),
        _row(11, "direct", model="mobilenetv2(width_multiplier=0.5)", ms=2.0, noisy=1,
             loaded_rounds=3, noise_reason="taken while other processes kept the CPUs busy"),
        _row(12, "spatial_pack", model="mobilenetv2(width_multiplier=0.5)", ms=2.5,
             status="verification_failed", verified=0),
    ]


def _lines(console: Console) -> list[str]:
    return console.export_text().splitlines()


def _body(lines: list[str], n: int) -> list[str]:
    """The n lines under a fitted table's header rule."""
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    return lines[rule + 1: rule + 1 + n]


# -- the results table ------------------------------------------------------------------

@pytest.mark.parametrize("width", [120, 100, 80])
def test_default_results_table_fits_one_line_a_row(width: int) -> None:
    rows = study_rows()
    out = Console(width=width, record=True)
    print_results(out, rows, "results in /somewhere/results.db (12 rows)")
    lines = _lines(out)
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    body = _body(lines, len(rows))
    shown = {"verification_failed": "verify_failed"}
    assert [line.split()[0] for line in body] == [shown.get(r.status, r.status) for r in rows]
    # the line after the rows is no continuation of one: the legend
    after = lines[lines.index(body[-1]) + 1]
    assert after.startswith("legend: ")
    legend = " ".join(lines[lines.index(after):])
    assert "resnet18 = resnet18(width_multiplier=0.5)" in legend
    assert f"weight_pruning = {PRUNED}" in legend.replace("  ", "")


def test_results_at_120_show_the_columns_that_matter_and_notes_in_full() -> None:
    rows = study_rows()
    out = Console(width=120, record=True)
    print_results(out, rows, "results")
    lines = _lines(out)
    header = lines[1].split()
    assert header == ["status", "model", "compression", "algorithm", "tuning", "median",
                      "next", "run", "accuracy", "note"]
    text = "\n".join(lines)
    assert "times in ms" in lines[0]
    body = _body(lines, len(rows))
    assert "direct(layout=NCHWc)" in body[3] and "metaschedule" in body[2]
    assert "10.00" in body[0] and "[9.000, 11.00]" in body[0]
    # which kind of interval that is, and what it rests on, per runtime
    said = " ".join(line.strip() for line in lines)
    assert "next run: where an independent run of the point lands (95%)" in said
    assert "tvm ±10.0% (prior, 0 of 30 pairs measured here)" in said  # the row says so
    # the long reasons are cut in their cell, numbered and given in full below
    assert body[8].split()[-1] == "[1]" and body[9].split()[-1] == "[2]"
    full = " ".join(line.strip() for line in lines[lines.index("notes in full:"):])
    assert REASON in full and "compile: TVMError: a very long message" in full
    assert "second line" not in text  # a note is the error's first line
    assert body[10].split()[-1] == "noisy"
    assert "left out for width" not in text


def test_narrow_terminal_leaves_out_low_priority_columns_and_says_which() -> None:
    out = Console(width=80, record=True)
    print_results(out, study_rows(), "results")
    lines = _lines(out)
    assert all(len(line) <= 80 for line in lines)
    assert "left out for width: next run, accuracy, note" in " ".join(lines[-2:])
    assert lines[1].split()[:5] == ["status", "model", "compression", "algorithm", "tuning"]


def test_labels_shortened_per_column_keep_rows_apart() -> None:
    assert short_labels(["direct", "direct(layout=NCHWc)", "gemm"]) == {
        "direct": "direct", "direct(layout=NCHWc)": "direct(layout=NCHWc)", "gemm": "gemm"}
    assert short_labels([PRUNED, MODEL, None]) == {PRUNED: "weight_pruning",
                                                   MODEL: "resnet18"}
    two = ["weight_pruning(level=0.5,levels=[0.5, 0.8])", PRUNED]
    assert short_labels(two) == {two[0]: "weight_pruning(level=0.5)",
                                 PRUNED: "weight_pruning(level=0.8)"}
    # params in one label only are what differs; a label in another form stays itself
    three = ["x(a=1)", "x(a=1,b={'k': [1, 2]})", "not a (label"]
    assert short_labels(three) == {"x(a=1)": "x", "x(a=1,b={'k': [1, 2]})": "x(b={'k': [1, 2]})",
                                   "not a (label": "not a (label"}
    assert split_label(PRUNED) == ("weight_pruning", {"level": "0.8", "levels": "[0.5, 0.8]"})
    assert split_label("f(x=(1,2),y='a,b')") == ("f", {"x": "(1,2)", "y": "'a,b'"})


def test_legend_gives_every_shortened_label_in_full_within_the_width() -> None:
    shortened = short_labels([TUNED, MODEL, PRUNED, "direct"])
    lines = legend_lines(shortened, 60)
    assert lines[0].startswith("legend: ") and all(len(line) <= 60 for line in lines)
    joined = "".join(line.strip() for line in lines)
    for full in (TUNED, MODEL, PRUNED):
        assert full.replace(" ", "") in joined.replace(" ", "")
    assert "direct" not in joined  # shown in full already: not in the legend
    assert legend_lines({"a": "a"}, 60) == []


def test_fit_gives_way_in_order_flexible_then_priority_then_cutting() -> None:
    cols = [Column("a", "a"), Column("b", "b", min_width=4), Column("c", "c", priority=1),
            Column("n", "n", flexible=True, min_width=3)]
    rows = [["x" * 10, "y" * 10, "z" * 10, "w" * 30]]
    assert fit(cols, rows, 100) == {0: 10, 1: 10, 2: 10, 3: 30}
    assert fit(cols, rows, 50) == {0: 10, 1: 10, 2: 10, 3: 14}  # the note gives way
    assert fit(cols, rows, 30) == {0: 10, 1: 10, 3: 6}  # then c is left out
    assert fit(cols, rows, 25) == {0: 10, 1: 8, 3: 3}  # then b is cut, a never
    assert fit(cols, rows, 10) == {0: 10, 1: 4, 3: 3}  # too narrow: rich cuts the rest


# -- dlas results: flags ------------------------------------------------------------------

@pytest.fixture
def results_ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Console]:
    with ResultStore(tmp_path / "results.db") as store:
        for row in study_rows():
            store.upsert(row, sweep="s")
    out = Console(width=120, record=True)
    monkeypatch.setattr(cli, "console", out)
    return ["--workspace", str(tmp_path)], out


def test_results_default_wide_and_columns(results_ws: tuple[list[str], Console]) -> None:
    ws, out = results_ws
    assert cli.main(["results", *ws]) == 0
    lines = _lines(out)
    assert all(len(line) <= 120 for line in lines)
    assert lines[1].split()[0] == "status" and "max_abs_diff" not in lines[1]

    assert cli.main(["results", "--wide", *ws]) == 0
    table = results_table(study_rows())
    assert [c.header for c in table.columns][-3:] == ["max_abs_diff", "compile_s", "error"]
    assert len(table.columns) == len(SUMMARY_COLUMNS)

    assert cli.main(["results", "--columns", "status,layout,latency_median_ms", *ws]) == 0
    picked = _lines(out)[-14:]
    assert picked[0].split() == ["status", "layout", "median"]
    assert len(picked[2].split()) == 3


def test_results_unknown_column_is_a_usage_error(results_ws: tuple[list[str], Console]
                                                 ) -> None:
    ws, out = results_ws
    assert cli.main(["results", "--columns", "status,nope", *ws]) == 2
    said = out.export_text().replace("\n", "")
    assert "unknown column(s) nope" in said and "latency_median_ms" in said and "note" in said


def test_results_json_keeps_every_column(results_ws: tuple[list[str], Console],
                                         capsys: pytest.CaptureFixture) -> None:
    ws, _ = results_ws
    assert cli.main(["results", "--json", *ws]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 12 and set(rows[0]) == set(ResultRow.model_fields)
    assert rows[0]["model"] == MODEL  # full labels, never shortened


def test_make_console_honours_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    monkeypatch.setenv("COLUMNS", "120")
    assert make_console().width == 120
    monkeypatch.delenv("COLUMNS")
    assert make_console().width == 240  # a log without $COLUMNS: wide, nothing folds


# -- plan, plugins, profile --------------------------------------------------------------

def test_plan_table_fits_120(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = Console(width=120, record=True)
    monkeypatch.setattr(cli, "console", out)
    assert cli.main(["plan", str(REPO / "configs/quickstart.yaml"),
                     "--workspace", str(tmp_path)]) == 0
    lines = _lines(out)
    assert all(len(line) <= 120 for line in lines), max(lines, key=len)
    assert lines[1] == "every point: datasets digits(image_size=16); targets host"
    body = _body(lines, 35)
    assert [int(line.split()[0]) for line in body] == list(range(1, 36))
    assert any("direct(layout=NCHWc)" in line for line in body)
    text = "\n".join(lines)
    assert "legend: " in text and "status in full:" in text
    assert lines[-1].startswith("35 points: 29 runnable, 6 not runnable")


def test_plugins_fit_120(monkeypatch: pytest.MonkeyPatch) -> None:
    out = Console(width=120, record=True)
    monkeypatch.setattr(cli, "console", out)
    assert cli.main(["plugins"]) == 0
    text = out.export_text()
    assert all(len(line) <= 120 for line in text.splitlines())
    assert "dlas 0.1.0: entry point 'models' = dlas.models.options" in text
    assert "mobilenetv2_imagenet " in text  # option names are never folded


def test_profile_point_table_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlas.results.layer_profile import LayerTime, PointProfile
    from dlas.runner.profile_console import point_table
    from dlas.runner.profiling import ProfileOutcome

    layers = [LayerTime(index=i, name=f"fused_conv2d_nchw_add_relu_with_a_long_name_{i}",
                        op="conv2d", weight_shape=[256, 128, 3, 3], data_shape=[1, 128, 28, 28],
                        strides=[2, 2], time_us=100.0 + i, share=0.1, gflops=12.5,
                        roof_fraction=0.3, bound="compute", roof_level="L2")
              for i in range(10)]
    profile = PointProfile(key="k", runtime="tvm", label="x", latency_median_ms=1.2,
                           layers_sum_ms=1.0, unaccounted=0.1, method="m", layers=layers)
    row = SimpleNamespace(model=MODEL, compression=PRUNED, algorithm="direct", tuning=TUNED)
    item = ProfileOutcome(None, row, "t", profile)  # type: ignore[arg-type]
    for width in (120, 80):
        out = Console(width=width, record=True)
        out.print(point_table(item, width))
        lines = _lines(out)
        assert all(len(line) <= width for line in lines)
        body = _body(lines, 8)
        assert all(line.split()[2] == "conv2d" for line in body)  # one line a layer
        assert "128->256 3x3 s2 @28x28" in body[0]


# -- the end of a run ------------------------------------------------------------------

def test_study_summary_names_fastest_ratio_tuning_counts_in_100_columns() -> None:
    lines = study_lines(study_rows())
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    text = "\n".join(lines)
    assert lines[0] == ("results of this sweep (12 points: 9 ok, 1 failed, 1 failed "
                        "verification, 1 not runnable, 1 noisy)")
    resnet, pruned, mobilenet = lines[3:6]
    # fastest TVM variant of resnet18 dense: gemm tuned, 4 ms, 1.25x faster than ORT (5)
    assert resnet.split()[:8] == ["resnet18", "none", "gemm", "+", "metaschedule", "4.000",
                                  "1.25x", "faster"]
    assert "gemm 2.00x" in resnet  # tuned vs untuned gemm: 8 / 4
    assert pruned.split()[:6] == ["resnet18", "weight_pruning", "direct_csr", "3.000",
                                  "1.50x", "faster"]
    assert pruned.split()[-2:] == ["0.97", "0.98"]  # compressed, then dense accuracy
    assert mobilenet.split()[:4] == ["mobilenetv2", "none", "direct", "2.000"]
    assert "metaschedule = " + TUNED[:40] in text
    assert "busy machine" in text and "--remeasure-noisy" in text
    assert "dlas results --status failed" in text
    more = more_line()
    assert "dlas results" in more and "dlas-workspace/report" in more


def test_run_summary_ends_with_the_study(tmp_path: Path) -> None:
    out = Console(width=160, record=True)
    console = RunConsole(progress=False, console=out)
    console.workspace_root = tmp_path / "elsewhere"
    rows = study_rows()
    report = RunReport(points=len(rows), ok=9, failed=1, verification_failed=1,
                       not_runnable=1, rows=rows)
    console.summary(report)
    text = out.export_text()
    assert "stages" in text and "9 ok, 1 failed, 1 failed verification, 1 not runnable" in text
    study = text.split("wall time")[1]
    assert "results of this sweep" in study
    assert all(len(line) <= 100 for line in study.splitlines())
    assert f"dlas report --workspace {tmp_path / 'elsewhere'}" in study.replace("\n  ", " ")
    assert "┃" not in study  # no wide table of every row


def test_the_summary_says_so_when_its_findings_cannot_be_computed() -> None:
    out = Console(width=100, record=True)
    console = RunConsole(progress=False, console=out)
    rows = study_rows()

    def broken(width: int) -> list[str]:
        raise FileNotFoundError("paper values not found")

    console.findings = broken
    console.results(RunReport(points=len(rows), ok=9, rows=rows))
    text = out.export_text()
    assert "observations: not decided here (FileNotFoundError" in text
    assert text.rstrip().splitlines()[-1].strip().endswith("report")  # the commands last


def test_brief_columns_are_what_the_issue_asks() -> None:
    assert BRIEF_COLUMNS == ["status", "model", "compression", "algorithm", "tuning",
                             "latency_median_ms", "next_run_ms", "accuracy", "note"]


def test_a_far_row_says_so_and_what_far_means() -> None:
    rows = [_row(1, "direct", ms=10.0, placement="near"),
            _row(2, "gemm", ms=14.0, placement="far"),
            _row(3, "spatial_pack", ms=9.0, placement="far", noisy=1)]
    out = Console(width=120, record=True)
    print_results(out, rows, "results")
    lines = _lines(out)
    body = _body(lines, 3)
    assert body[0].split()[-1] != "far" and body[1].split()[-1] == "far"
    assert body[2].rstrip().endswith("noisy, far")
    said = " ".join(line.strip() for line in lines)
    assert "far: timed while the two vCPUs sat on distant cores" in said
    assert "in the same vCPU placement" in said


def test_each_point_line_says_how_far_the_run_is_against_its_estimate() -> None:
    from dlas.runner.console import clock

    assert [clock(s) for s in (5, 130, 3900)] == ["5s", "2m10s", "1h05m"]
    console = RunConsole(progress=False, console=Console(width=120, record=True))
    assert console.elapsed() == ""  # before the sweep starts
    console.started = time.monotonic() - 130
    assert "(2m10s)" in console.elapsed()
    console.estimated_s = 660
    assert "(2m10s of ~11m00s estimated)" in console.elapsed()
    console.estimated_s = 100
    assert "(2m10s, over the ~1m40s estimate)" in console.elapsed()


def test_interval_notes_are_wrapped_to_the_terminal_not_left_to_it() -> None:
    """`dlas results` prints through a console that does not wrap what it is given."""
    from dlas.runner.console import interval_notes

    rows = [*study_rows(), _row(13, "gemm", ms=3.0, placement="far")]
    for width in (80, 120):
        lines = interval_notes(rows, {"next_run_ms", "latency_ci_ms"}, width)
        assert len(lines) > 3 and all(len(line) <= width for line in lines)
        assert lines[0].startswith("95% CI:") and any(x.startswith("far:") for x in lines)


def test_the_estimate_corrects_itself_as_stages_finish() -> None:
    """Planned 100 s over two compiles (40 s each) and a measure timed in 2 passes (20 s):
    a run whose first compile took 80 s projects the rest at its pace so far blended with
    the plan's (the plan weighing as a quarter of its seconds: (80 + 25) / (40 + 25)); the
    line says so beside the first estimate, and the projection ends at the time spent."""
    from dlas.runner.eta import PLAN_WEIGHT

    assert PLAN_WEIGHT == 0.25
    from dlas.runner.eta import RunningEstimate

    eta = RunningEstimate.of(100.0, [("compile", "a", 40.0, 0.0), ("compile", "b", 0.0, 40.0),
                                     ("measure", "m", 0.0, 20.0)], {"measure"},
                             pass_weights=(1.0, 1.0))
    assert eta.projected_s(10.0) == 100.0  # nothing done: the plan
    eta.finished("compile", "a")
    assert eta.projected_s(80.0) == pytest.approx(80.0 + 60.0 * 105.0 / 65.0)
    assert eta.projected_s(40.0) == pytest.approx(100.0)  # on the plan's pace: the plan
    eta.finished("compile", "a")  # a key reported again counts once
    eta.finished("train", "x")  # not planned (cached when planned): ignored
    assert eta.done_s == 40.0
    eta.finished("compile", "b")
    eta.finished("measure", "m")
    assert eta.done_s == 90.0  # one pass of two
    eta.finished("measure", "m")
    assert eta.projected_s(200.0) == 200.0
    console = RunConsole(progress=False, console=Console(width=120, record=True))
    console.started = time.monotonic() - 80
    console.estimated_s = 100.0
    console.eta = RunningEstimate.of(100.0, [("compile", "a", 40.0, 0.0),
                                             ("compile", "b", 40.0, 0.0),
                                             ("measure", "m", 20.0, 0.0)], {"measure"},
                                            pass_weights=(1.0, 1.0))
    console.stage("compile", "done", "a", 80.0)
    assert "(1m20s of ~2m57s, at this run's pace; ~1m40s estimated)" in console.elapsed()


def test_timed_stages_count_at_each_passs_point_end() -> None:
    """Later timing passes time points in group workers, not as stages: a timed stage is
    counted when its point ends, once per pass, so the projection ends at the time spent."""
    from dlas.runner.eta import TIMED, RunningEstimate
    from dlas.stages import TIMED_STAGES

    assert TIMED == TIMED_STAGES
    console = RunConsole(progress=False, console=Console(width=120, record=True))
    console.eta = RunningEstimate.of(30.0, [("compile", "c", 10.0, 0.0),
                                            ("measure", "m", 20.0, 0.0)],
                                     set(TIMED), pass_weights=(1.0, 1.0))
    console.stage("measure", "done", "m", 5.0)  # not counted here
    assert console.eta.done_s == 0.0
    row = _row(1, "direct", timing_key="m", max_abs_diff=1e-6)
    console.point_end(row)
    assert console.eta.done_s == 10.0
    console.point_end(row)
    console.point_end(row)  # a third report: still two passes
    console.stage("compile", "done", "c", 9.0)
    assert console.eta.done_s == 30.0 and console.eta.projected_s(42.0) == 42.0


def test_a_timing_groups_members_count_when_its_rounds_end_not_line_by_line() -> None:
    """The executor says each member timed as the group's rounds end (`timed`); its line
    then counts nothing again, and a point timed without a group still counts at its line."""
    from dlas.runner.eta import RunningEstimate

    console = RunConsole(progress=False, console=Console(width=120, record=True))
    console.eta = RunningEstimate.of(40.0, [("measure", "a", 20.0, 0.0),
                                            ("measure", "b", 20.0, 0.0)],
                                     {"measure"}, pass_weights=(1.0, 1.0))
    console.timed("measure", "a")
    console.timed("measure", "b")
    assert console.eta.done_s == 20.0  # both members' first pass, before any line
    console.point_end(_row(1, "direct", timing_key="a", max_abs_diff=1e-6))
    console.point_end(_row(2, "gemm", timing_key="b", max_abs_diff=1e-6))
    assert console.eta.done_s == 20.0
    console.point_end(_row(1, "direct", timing_key="a", max_abs_diff=1e-6))  # no group
    assert console.eta.done_s == 30.0
    RunConsole(progress=False).timed("measure", "a")  # no estimate: nothing to count


def test_a_timed_stages_passes_count_as_the_plan_priced_them() -> None:
    """The built-in cost gives a later timing pass `LATER_PASS_SHARE` of the first's
    seconds (it re-checks one input where the first verifies in full); a measured entry
    gives every pass the same. Each pass's end credits that share, not an even split: an
    even split credited the quickstart's first pass a third of its timing where it took
    half, and its projection sat high until the last pass."""
    from dlas.estimate.costmodel import LATER_PASS_SHARE, pass_weights
    from dlas.runner.eta import RunningEstimate

    assert LATER_PASS_SHARE == 0.5 and pass_weights(3) == (1.0, 0.5, 0.5)
    # built in: 3 passes at 1 + 0.5 + 0.5 shares of 40 s; measured: 3 x 10 s
    eta = RunningEstimate.of(110.0, [("train", "t", 0.0, 40.0),
                                     ("measure", "m", 30.0, 40.0)], {"measure"},
                             pass_weights=pass_weights(3))
    eta.finished("train", "t")
    eta.finished("measure", "m")
    assert eta.done_s == pytest.approx(40.0 + 10.0 + 20.0)  # the first pass: half
    assert eta.projected_s(70.0) == pytest.approx(110.0)  # on plan: the plan
    eta.finished("measure", "m")
    assert eta.done_s == pytest.approx(70.0 + 10.0 + 10.0)
    eta.finished("measure", "m")
    eta.finished("measure", "m")  # a fourth report: still three passes
    assert eta.done_s == pytest.approx(110.0)
    one = RunningEstimate.of(10.0, [("measure", "m", 4.0, 6.0)], {"measure"},
                             pass_weights=pass_weights(1))
    one.finished("measure", "m")
    assert one.done_s == pytest.approx(10.0)
