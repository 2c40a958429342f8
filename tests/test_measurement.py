"""The measurement method's bookkeeping: all samples kept, the median reported with its
quartiles, the coefficient of variation stored and a noisy point flagged (dispersed, or
timed on a busy machine), without the noise threshold or the retry budgets touching any
cached stage or point key. The sampler itself: tests/test_sampling.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dlas.results.store import ResultStore, latency_columns
from dlas.runner.runner import Runner, RunReport, Workspace
from dlas.stages import stage_keys
from dlas.sweep.config import Budgets, parse_config
from dlas.sweep.grid import UNKEYED_BUDGETS, digest, expand
from dlas.tuning.baselines.base import time_peer
from tests.conftest import tiny_sweep


def test_latency_columns_statistics_cv_and_noise_flag() -> None:
    steady = latency_columns([2.0, 2.0, 2.0], cv_threshold=0.05)
    assert steady.latency_median_ms == 2.0 and steady.latency_cv == 0.0
    assert steady.noisy == 0
    samples = [1.0, 2.0, 3.0, 10.0]
    cols = latency_columns(samples, cv_threshold=0.05)
    assert cols.latency_samples_ms == samples  # every sample is stored
    assert cols.latency_median_ms == 2.5 and cols.latency_min_ms == 1.0
    assert cols.latency_cv == pytest.approx(np.std(samples) / np.mean(samples))
    assert cols.noisy == 1 and cols.noise_reason == "cv 88% > 5%"
    assert (cols.latency_q1_ms, cols.latency_q3_ms) == (1.75, 4.75)
    assert cols.load_retries is None and cols.noise_log is None  # not recorded: unknown
    assert latency_columns(samples, cv_threshold=10.0).noisy == 0
    assert latency_columns([1.0, 1.001], cv_threshold=0.0).noisy == 1
    with pytest.raises(ValueError, match="at least one sample"):
        latency_columns([], 0.05)


def test_time_peer_discards_warmup_and_averages_number_calls() -> None:
    calls: list[int] = []
    samples = time_peer(lambda: calls.append(1), repeat=4, number=3, warmup=2)
    assert len(samples) == 4 and len(calls) == 2 + 4 * 3
    assert all(s >= 0 for s in samples)
    with pytest.raises(ValueError):
        time_peer(lambda: None, repeat=0)


def test_noise_budgets_are_documented_and_outside_every_key() -> None:
    assert Budgets().cv_threshold == 0.05
    assert "coefficient of variation" in Budgets.model_fields["cv_threshold"].description
    assert (Budgets().noise_retries, Budgets().noise_budget_s) == (5, 20.0)
    assert "busy" in Budgets.model_fields["noise_budget_s"].description
    text = tiny_sweep(algorithms=["direct"]).replace("tuning: [none]",
                                                     "tuning: [none, onnxruntime]")
    loose = expand(parse_config(text.replace(
        "verify_samples: 4",
        "verify_samples: 4\n  cv_threshold: 0.5\n  noise_retries: 0\n  noise_budget_s: 1")))
    default = expand(parse_config(text))
    assert [p.budgets.cv_threshold for p in loose] == [0.5, 0.5]
    assert [p.budgets.noise_retries for p in loose] == [0, 0]
    for a, b in zip(default, loose, strict=True):
        assert a.key == b.key and stage_keys(a) == stage_keys(b)
        # the point key is the one a checkout without the budget computed for this point
        before = {k: v for k, v in a.budgets.model_dump(mode="json").items()
                  if k not in UNKEYED_BUDGETS}
        assert a.key == digest({"choices": {layer: c.identity()
                                            for layer, c in a.choices.items()},
                                "budgets": before})


def run(text: str, root: Path, cache: Path) -> RunReport:
    return Runner(Workspace(root, cache), progress=False).run(parse_config(text))


def test_noisy_points_are_flagged_and_a_new_threshold_recomputes_nothing(
        tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture) -> None:
    text = tiny_sweep().replace("tuning: [none]", "tuning: [none, pytorch]")
    first = run(text, tmp_path, shared_cache)
    assert first.ok == 2
    for row in first.rows:
        cv = np.std(row.latency_samples_ms) / np.mean(row.latency_samples_ms)
        assert row.latency_cv == pytest.approx(cv)
        # on a machine other suites share, samples may have been timed under load
        assert row.noisy == int(cv > 0.05 or row["loaded_samples"] > 0)
        assert row.noise_log["probe"]["kind"] == "cpu time of other processes"
    capsys.readouterr()

    # forced noisy: any variation at all exceeds a zero threshold
    strict = text.replace("verify_samples: 4", "verify_samples: 4\n  cv_threshold: 0")
    second = run(strict, tmp_path, shared_cache)
    assert second.ok == 2 and second.recomputed_nothing  # no stage re-ran for the flag
    out = capsys.readouterr().out
    with ResultStore(tmp_path / "results.db") as store:
        stored = store.rows()
    assert len(stored) == 2  # the same points, their rows rewritten
    for row in stored:
        assert row.latency_cv > 0 and row.noisy == 1
        assert f"noisy (cv {row.latency_cv:.0%} > 0%" in out
    assert "noisy" in out.split("results of this sweep")[1]  # the results table shows it


def test_older_database_gains_the_noise_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE points (point_key TEXT PRIMARY KEY, status TEXT NOT NULL, "
                     "latency_median_ms REAL, created_at REAL, updated_at REAL)")
        conn.execute("INSERT INTO points VALUES ('old', 'ok', 1.5, 1.0, 1.0)")
    with ResultStore(path) as store:
        store.upsert({"point_key": "new", "status": "ok", **latency_columns([1.0, 3.0], 0.05),
                      "runtime_info": {"runtime": "onnxruntime", "threads": 2}})
        old, new = store.get("old"), store.get("new")
    assert old.latency_cv is None and old.noisy is None
    assert new.latency_cv == pytest.approx(0.5) and new.noisy == 1
    assert new.runtime_info == {"runtime": "onnxruntime", "threads": 2}


def forced_load(monkeypatch: pytest.MonkeyPatch, cores: float,
                busy_windows: int | None = None) -> None:
    """Every load probe reads `cores` of other processes' work, for the first
    `busy_windows` intervals between readings (all of them when None; quiet after): the
    detector's input forced, for the TVM and baseline paths alike. Counted in readings,
    not seconds, so a slow (loaded) test machine sees the same story."""
    import time

    from dlas.measure import sampling

    state = {"readings": 0, "busy": 0.0, "last": None}

    def reader(cpus: object) -> tuple[float, float, float]:
        now = time.perf_counter()
        if state["last"] is not None and (busy_windows is None
                                          or state["readings"] <= busy_windows):
            state["busy"] += cores * (now - state["last"])
        state["last"] = now
        state["readings"] += 1
        return state["busy"], 0.0, 0.0

    monkeypatch.setattr(sampling, "read_cpu_times", reader)


def test_a_busy_machine_flags_tvm_and_baseline_rows_and_says_so(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    forced_load(monkeypatch, cores=2.0)
    text = tiny_sweep().replace("tuning: [none]", "tuning: [none, onnxruntime]").replace(
        "verify_samples: 4", "verify_samples: 4\n  cv_threshold: 10\n  noise_budget_s: 0.3"
    ).replace("measure_repeat: 5", "measure_repeat: 7")  # a measurement no test cached
    report = run(text, tmp_path, shared_cache)
    assert report.ok == 2
    out = capsys.readouterr().out
    assert "machine busy: other processes used 2.00 cores" in out
    assert "retry budget (5 re-takes, 0.3 s) is spent" in out
    for row in report.rows:
        assert row.noisy == 1 and row["loaded_samples"] == row.measure_repeat == 7
        assert row.load_other_cores == pytest.approx(2.0, abs=0.05)
        assert "7 of 7 samples taken on a busy machine" in row.noise_reason
        assert row.latency_q1_ms <= row.latency_median_ms <= row.latency_q3_ms
    assert "busy machine" in out.split("results of this sweep")[1]


def test_load_that_passes_is_waited_out_and_the_row_is_clean(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forced_load(monkeypatch, cores=2.0, busy_windows=0)  # quiet throughout: no re-take
    text = tiny_sweep().replace("verify_samples: 4", "verify_samples: 4\n  cv_threshold: 10")
    text = text.replace("measure_repeat: 5", "measure_repeat: 6")  # measured here, not reused
    quiet = run(text, tmp_path / "quiet", shared_cache).rows[0]
    assert (quiet.load_retries, quiet["loaded_samples"], quiet.noisy) == (0, 0, 0)

    forced_load(monkeypatch, cores=2.0, busy_windows=1)  # busy for the first chunk only
    text = text.replace("measure_repeat: 6", "measure_repeat: 8")  # a new measurement
    row = run(text, tmp_path / "busy", shared_cache).rows[0]
    assert row.load_retries >= 1 and row["loaded_samples"] == 0 and row.noisy == 0
    assert row.noise_log["events"][0]["event"] == "retaken"


def test_remeasure_noisy_times_flagged_points_again_without_recompiling(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    from dlas.cli import main

    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep().replace(
        "verify_samples: 4", "verify_samples: 4\n  cv_threshold: 10\n  noise_budget_s: 0"
    ).replace("measure_repeat: 5", "measure_repeat: 9"))  # a measurement no test cached
    args = ["run", str(config), "--no-progress", "--workspace", str(tmp_path / "ws"),
            "--cache-dir", str(shared_cache)]
    forced_load(monkeypatch, cores=2.0)
    assert main(args) == 0
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        (busy,) = store.rows()
    assert busy.noisy == 1 and busy["loaded_samples"] == 9

    assert main(args) == 0  # a plain re-run reuses the noisy timing
    capsys.readouterr()
    forced_load(monkeypatch, cores=0.0)  # the machine is quiet now
    assert main([*args, "--remeasure-noisy"]) == 0
    out = capsys.readouterr().out
    assert "re-measuring 1 point(s) flagged noisy" in out
    assert "compile   reused" in out and "measure   computing" in out
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        (quiet,) = store.rows()
    assert (quiet.noisy, quiet["loaded_samples"]) == (0, 0)
    assert quiet.point_key == busy.point_key
    assert main([*args, "--remeasure-noisy"]) == 0  # nothing noisy left: nothing dropped
    assert "re-measuring 0 point(s)" in capsys.readouterr().out
