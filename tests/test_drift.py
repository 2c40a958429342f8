"""The next run's range: this machine's drift, kept across workspaces, widens a row's
interval and comparisons between points timed apart (dlas.results.drift, drift_record)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlas.measure.record import TimingRound, TimingRun
from dlas.results import drift_record
from dlas.results.drift import (
    MIN_PAIRS,
    PRIOR,
    PRIOR_OTHER,
    Drift,
    estimate,
    next_run_range,
    pair_half_width,
    row_drift,
    widen,
)
from dlas.results.latency import chunk_spread
from dlas.results.reproducibility import TimedPoint, range_coverage
from dlas.results.row import ResultRow
from dlas.runner.console import drift_line
from dlas.runner.rows import next_run_columns


def test_prior_until_the_machine_has_enough_pairs_then_its_percentile() -> None:
    few = estimate("tvm", [0.01] * (MIN_PAIRS - 1))
    assert few.half_width == PRIOR["tvm"] and few.pairs == MIN_PAIRS - 1
    assert few.basis == f"prior, {MIN_PAIRS - 1} of {MIN_PAIRS} pairs measured here"
    assert estimate("a_plugin_runtime", []).half_width == PRIOR_OTHER
    measured = [0.01] * 95 + [0.2] * 5  # the 95th percentile sits at the tail's edge
    own = estimate("onnxruntime", measured)
    assert own.pairs == 100 and own.basis == "this machine, 100 pairs"
    assert 0.01 <= own.half_width <= 0.2
    assert estimate("tvm", [0.03] * MIN_PAIRS).half_width == pytest.approx(0.03)


def test_next_run_range_is_the_median_widened_and_never_inside_the_ci() -> None:
    drift = Drift("tvm", math.log(1.1), MIN_PAIRS)
    low, high = next_run_range(10.0, 9.9, 10.1, drift)
    assert (low, high) == pytest.approx((10 / 1.1, 11.0))
    # a CI wider than the drift stays the range
    assert next_run_range(10.0, 8.0, 13.0, drift) == (8.0, 13.0)
    assert next_run_range(10.0, None, None, Drift("tvm", 0.0, 0)) == (10.0, 10.0)


def test_comparisons_of_points_timed_apart_add_both_drifts_in_quadrature() -> None:
    tvm, torch = 0.06, 0.08
    assert pair_half_width(tvm, tvm) == pytest.approx(0.06)
    assert pair_half_width(tvm, torch) == pytest.approx(math.sqrt((0.06**2 + 0.08**2) / 2))
    assert widen(2.0, 1.9, 2.1, 0.0) == pytest.approx((1.9, 2.1))
    low, high = widen(2.0, 2.0 * math.exp(-0.03), 2.0 * math.exp(0.04), 0.04)
    assert (low, high) == pytest.approx((2.0 * math.exp(-0.05),
                                         2.0 * math.exp(math.hypot(0.04, 0.04))))


def _add(path: Path, key: str, run: str, invocation: str, at: float, ms: float,
         placement: str = "near", runtime: str = "tvm", machine: str = "cpu x2") -> None:
    drift_record.add_figure(key, run, runtime, placement, at, ms, machine=machine,
                            invocation=invocation, path=path)


def test_pairs_are_consecutive_runs_of_one_artifact_from_other_invocations(
        tmp_path: Path) -> None:
    path = tmp_path / "drift.sqlite"
    assert drift_record.next_run_log_ratios("tvm", "cpu x2", path) == []
    _add(path, "k1", "r1", "inv-a", 1.0, 10.0)
    _add(path, "k1", "r2", "inv-a", 2.0, 12.0)  # the same invocation's next pass: no pair
    _add(path, "k1", "r3", "inv-b", 3.0, 11.0)  # the next invocation: a pair with r2
    _add(path, "k1", "r4", "inv-c", 4.0, 30.0, placement="far")  # another placement
    _add(path, "k2", "r5", "inv-c", 5.0, 5.0)   # another artifact
    _add(path, "k1", "r6", "inv-d", 6.0, 11.0, machine="other x2")  # another machine
    _add(path, "k1", "r7", "inv-e", 7.0, 1.0, runtime="pytorch")
    _add(path, "k1", "r3", "inv-b", 3.0, 11.0)  # the same run again: replaced, not added
    ratios = drift_record.next_run_log_ratios("tvm", "cpu x2", path)
    assert ratios == pytest.approx([abs(math.log(11 / 12))])
    _add(path, "k1", "bad", "inv-f", 8.0, float("nan"))  # nothing to learn from
    assert len(drift_record.next_run_log_ratios("tvm", "cpu x2", path)) == 1
    # inv-b's second pass pairs with inv-a's latest too, not with inv-b's first
    _add(path, "k1", "r8", "inv-b", 9.0, 13.2)
    ratios = drift_record.next_run_log_ratios("tvm", "cpu x2", path)
    assert ratios == pytest.approx([abs(math.log(11 / 12)), abs(math.log(13.2 / 12))])
    # the running invocation's own figures are not read: its rows share one estimate
    assert drift_record.next_run_log_ratios("tvm", "cpu x2", path, leave_out="inv-b") == []


def test_a_row_says_which_drift_its_range_rests_on(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "drift.sqlite"
    monkeypatch.setenv("DLAS_DRIFT_RECORD", str(path))
    row = ResultRow(point_key="p", backend="onnxruntime", latency_median_ms=2.0,
                    latency_ci_low_ms=1.98, latency_ci_high_ms=2.02, placement="near")
    cols = next_run_columns(row)
    assert cols["next_run_basis"].startswith("prior, 0 of")
    assert cols["next_run_drift"] == PRIOR["onnxruntime"]
    assert cols["next_run_high_ms"] == pytest.approx(2.0 * math.exp(PRIOR["onnxruntime"]))
    machine = drift_record.this_machine()
    for i in range(MIN_PAIRS + 1):  # one artifact, each run another invocation, 2% apart
        _add(path, "k", f"r{i}", f"inv{i}", float(i), 2.0 * (1.02 if i % 2 else 1.0),
             runtime="onnxruntime", machine=machine)
    cols = next_run_columns(row)
    assert cols["next_run_basis"] == f"this machine, {MIN_PAIRS} pairs"
    assert cols["next_run_drift"] == pytest.approx(math.log(1.02))
    # a board's timing (placement unknown) is not this machine's: the prior
    board = row.model_copy(update={"placement": "unknown"})
    assert next_run_columns(board)["next_run_drift"] == PRIOR["onnxruntime"]


def _chunks(medians: list[float], placement: str = "near", run_id: str = "r") -> TimingRun:
    """A run whose chunks read `medians` (each chunk 1% around its median)."""
    return TimingRun(run_id=run_id, started_at=1.0, placement=placement,
                     rounds=[TimingRound(index=i, placement=placement,
                                         samples_ms=[m * 0.99, m, m * 1.01])
                             for i, m in enumerate(medians)])


def test_a_row_whose_chunks_lie_further_apart_than_the_drift_gets_a_range_as_wide(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short two-thread kernel whose chunks read in two states 30% apart (an SMT
    neighbour busy or idle): its next run may fall in either, so its range spans them;
    a row whose chunks agree keeps the runtime's drift, and so does one with too few
    chunks or whose spread lies in another placement."""
    monkeypatch.setenv("DLAS_DRIFT_RECORD", str(tmp_path / "drift.sqlite"))
    row = ResultRow(point_key="p", backend="tvm", latency_median_ms=1.0,
                    latency_ci_low_ms=0.99, latency_ci_high_ms=1.01, placement="near")
    two_states = [_chunks([1.0, 1.3] * 3, run_id="a"), _chunks([1.0, 1.3], run_id="b")]
    assert chunk_spread(two_states, "near") == pytest.approx(math.log(1.3))
    cols = next_run_columns(row, two_states)
    assert cols["next_run_drift"] == pytest.approx(math.log(1.3))
    assert cols["next_run_high_ms"] == pytest.approx(1.3)
    assert cols["next_run_low_ms"] == pytest.approx(1 / 1.3)
    assert cols["next_run_basis"] == ("prior, 0 of 30 pairs measured here; widened to its own "
                                      "chunks' spread (30.0%, interquartile)")
    agreeing = [_chunks([1.0, 1.01, 0.99, 1.0, 1.02])]
    assert next_run_columns(row, agreeing)["next_run_drift"] == PRIOR["tvm"]
    assert chunk_spread([_chunks([1.0, 1.3, 1.0])], "near") is None  # too few chunks
    elsewhere = [_chunks([1.0] * 4), _chunks([1.0, 1.5] * 4, placement="far", run_id="f")]
    assert next_run_columns(row, elsewhere)["next_run_drift"] == PRIOR["tvm"]
    assert next_run_columns(row)["next_run_drift"] == PRIOR["tvm"]  # no runs: the drift
    assert row_drift(Drift("tvm", 0.05, 40), 0.04).half_width == 0.05


def test_the_drift_line_names_the_runtimes_drift_and_the_rows_widened_past_it() -> None:
    def row(drift: float, basis: str) -> ResultRow:
        return ResultRow(point_key=f"p{drift}", backend="tvm", next_run_drift=drift,
                         next_run_basis=basis)

    line = drift_line([row(0.2, "this machine, 40 pairs; widened to its own chunks' "
                                "spread (22.1%, interquartile)"),
                       row(math.log(1.05), "this machine, 40 pairs")])
    assert line == ("tvm ±5.0% (this machine, 40 pairs; 1 row wider, by their own "
                    "chunks' spread)")
    assert drift_line([row(math.log(1.05), "this machine, 40 pairs")]) == \
        "tvm ±5.0% (this machine, 40 pairs)"
    # every row widened (PyTorch has one row per model and compression): no row shows the
    # runtime's own drift, and the line does not pass a widened one off as it
    assert drift_line([row(0.2, "prior, 3 of 30 pairs measured here; widened to its own "
                                "chunks' spread (22.1%, interquartile)"),
                       row(0.1, "prior, 3 of 30 pairs measured here; widened to its own "
                                "chunks' spread (10.5%, interquartile)")]) == \
        "tvm ±10.5% to ±22.1% (every row by its own chunks' spread)"


def test_an_unwritable_record_costs_the_pairs_not_the_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAS_DRIFT_RECORD", str(tmp_path))  # a directory: sqlite cannot open
    assert drift_record.machine_drift("tvm").half_width == PRIOR["tvm"]
    from dlas.runner import rows

    run = TimingRun(run_id="r", started_at=1.0, placement="near",
                    rounds=[TimingRound(index=0, placement="near", samples_ms=[1.0, 1.1])])

    class _Point:
        is_baseline = False

    rows.keep_figure(_Point(), "k", run)  # type: ignore[arg-type]  # warns, does not raise


def test_coverage_counts_later_runs_inside_the_earlier_runs_range() -> None:
    def run(i: int, ms: float, placement: str = "near") -> TimingRun:
        return TimingRun(run_id=f"r{i}", started_at=float(i), placement=placement,
                         rounds=[TimingRound(index=j, placement=placement, samples_ms=[ms] * 5)
                                 for j in range(4)])

    point = TimedPoint("p", "tvm", [run(0, 10.0), run(1, 10.5), run(2, 13.0),
                                    run(3, 30.0, "far")], drift=math.log(1.1))
    (cov,) = range_coverage([point, TimedPoint("old", "tvm", [run(0, 1.0)], None)])
    assert (cov.runtime, cov.pairs, cov.inside) == ("tvm", 2, 1)
    assert cov.share == 0.5 and cov.drift == pytest.approx(math.log(1.1))


def test_a_damaged_record_costs_the_pairs_not_the_sweep(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record cut short or overwritten (a crash, a full disk) is not a database any more:
    the ranges fall back to the prior and timings are still taken."""
    path = tmp_path / "drift.sqlite"
    path.write_bytes(b"not a database " * 100)
    monkeypatch.setenv("DLAS_DRIFT_RECORD", str(path))
    drift = drift_record.machine_drift("pytorch")
    assert drift.half_width == PRIOR["pytorch"] and drift.pairs == 0
    from dlas.runner import rows

    run = TimingRun(run_id="r", started_at=1.0, placement="near",
                    rounds=[TimingRound(index=0, placement="near", samples_ms=[1.0, 1.1])])

    class _Point:
        is_baseline = False

    rows.keep_figure(_Point(), "k", run)  # type: ignore[arg-type]  # warns, does not raise


def test_an_invocation_keeps_one_figure_per_entry_pooled_over_its_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three passes of one `dlas run` (runs after the invocation started) leave one figure
    of the entry in the record, their pooled median, replaced pass by pass: a pair is what
    two invocations' rows differ by. A run from before this invocation (an earlier one's,
    kept in the workspace's history) is not pooled into it."""
    import sqlite3

    from dlas.runner import rows

    path = tmp_path / "drift.sqlite"
    monkeypatch.setenv("DLAS_DRIFT_RECORD", str(path))
    start = drift_record.INVOCATION_STARTED

    def run(i: int, ms: float, at: float) -> TimingRun:
        return TimingRun(run_id=f"r{i}", started_at=at, placement="near",
                         rounds=[TimingRound(index=j, placement="near", samples_ms=[ms] * 5)
                                 for j in range(4)])

    class _Point:
        is_baseline = False

    old = run(0, 50.0, start - 100.0)
    history = [old]
    for i, ms in enumerate((1.0, 1.0, 1.3), start=1):
        history.append(run(i, ms, start + i))
        rows.keep_figure(_Point(), "k", history[-1], history)  # type: ignore[arg-type]
    with sqlite3.connect(path) as conn:
        kept = conn.execute("SELECT run_id, invocation, median_ms FROM run_figures").fetchall()
    assert kept == [(f"{drift_record.INVOCATION}-near", drift_record.INVOCATION, 1.0)]


def test_cpus_the_hypervisor_names_alike_keep_separate_records(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Zen 3 and Zen 4 both read 'AMD EPYC': their family and model tell them apart, so a
    drift learned on one does not set the other's next-run range."""
    from dlas.targets import host

    def cpu(model: str) -> dict[str, str]:
        return {"model name": "AMD EPYC", "cpu family": "25", "model": model}

    def machine(fields: dict[str, str]) -> str:
        monkeypatch.setattr(host, "machine_cpuinfo_fields", lambda: fields)
        drift_record.this_machine.cache_clear()  # read once per process
        return drift_record.this_machine()

    zen3, zen4 = machine(cpu("1")), machine(cpu("17"))
    assert zen3 != zen4 and "family 25 model 17" in zen4
    assert machine({"Hardware": "board"}).startswith("board x")
    # the record is the silicon's: a run as a saved CPU (DLAS_CPUINFO) shares it
    monkeypatch.setenv(host.CPUINFO_ENV, "zen1")
    assert machine(cpu("17")) == zen4
    drift_record.this_machine.cache_clear()
