"""The measurement method's bookkeeping: all samples kept, the median reported, the
coefficient of variation stored and a noisy point flagged, without the noise threshold
touching any cached stage or point key."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dlas.results.store import ResultStore, latency_columns
from dlas.runner.runner import Runner, RunReport, Workspace
from dlas.runner.stages import stage_keys
from dlas.sweep.config import Budgets, parse_config
from dlas.sweep.grid import ROW_ONLY_BUDGETS, digest, expand
from dlas.tuning.baselines.base import time_peer
from tests.conftest import tiny_sweep


def test_latency_columns_statistics_cv_and_noise_flag() -> None:
    steady = latency_columns([2.0, 2.0, 2.0], cv_threshold=0.05)
    assert steady["latency_median_ms"] == 2.0 and steady["latency_cv"] == 0.0
    assert steady["noisy"] == 0
    samples = [1.0, 2.0, 3.0, 10.0]
    cols = latency_columns(samples, cv_threshold=0.05)
    assert cols["latency_samples_ms"] == samples  # every sample is stored
    assert cols["latency_median_ms"] == 2.5 and cols["latency_min_ms"] == 1.0
    assert cols["latency_cv"] == pytest.approx(np.std(samples) / np.mean(samples))
    assert cols["noisy"] == 1
    assert latency_columns(samples, cv_threshold=10.0)["noisy"] == 0
    assert latency_columns([1.0, 1.001], cv_threshold=0.0)["noisy"] == 1
    with pytest.raises(ValueError, match="at least one sample"):
        latency_columns([], 0.05)


def test_time_peer_discards_warmup_and_averages_number_calls() -> None:
    calls: list[int] = []
    samples = time_peer(lambda: calls.append(1), repeat=4, number=3, warmup=2)
    assert len(samples) == 4 and len(calls) == 2 + 4 * 3
    assert all(s >= 0 for s in samples)
    with pytest.raises(ValueError):
        time_peer(lambda: None, repeat=0)


def test_cv_threshold_is_a_documented_budget_outside_every_key() -> None:
    assert Budgets().cv_threshold == 0.05
    assert "coefficient of variation" in Budgets.model_fields["cv_threshold"].description
    text = tiny_sweep(algorithms=["direct"]).replace("tuning: [none]",
                                                     "tuning: [none, onnxruntime]")
    loose = expand(parse_config(text.replace("verify_samples: 4",
                                             "verify_samples: 4\n  cv_threshold: 0.5")))
    default = expand(parse_config(text))
    assert [p.budgets.cv_threshold for p in loose] == [0.5, 0.5]
    for a, b in zip(default, loose, strict=True):
        assert a.key == b.key and stage_keys(a) == stage_keys(b)
        # the point key is the one a checkout without the budget computed for this point
        before = {k: v for k, v in a.budgets.model_dump(mode="json").items()
                  if k not in ROW_ONLY_BUDGETS}
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
        cv = np.std(row["latency_samples_ms"]) / np.mean(row["latency_samples_ms"])
        assert row["latency_cv"] == pytest.approx(cv)
        assert row["noisy"] == int(cv > 0.05)
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
        assert row["latency_cv"] > 0 and row["noisy"] == 1
        assert f"noisy (cv {row['latency_cv']:.0%})" in out
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
    assert old["latency_cv"] is None and old["noisy"] is None
    assert new["latency_cv"] == pytest.approx(0.5) and new["noisy"] == 1
    assert new["runtime_info"] == {"runtime": "onnxruntime", "threads": 2}
