"""The stage cache's atomicity and the results store."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlas.results.store import ResultStore
from dlas.runner.cache import Cache


def test_cache_publishes_only_complete_entries(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    meta = {"a": 1}
    with pytest.raises(RuntimeError):
        with cache.write("train", "k1", meta) as tmp:
            (tmp / "model.pt").write_text("half")
            raise RuntimeError("interrupted mid-stage")
    assert not cache.has("train", "k1")
    assert not any(p.name.startswith(".tmp") for p in (tmp_path / "train").iterdir())

    with cache.write("train", "k1", meta) as tmp:
        (tmp / "model.pt").write_text("whole")
        meta["seconds"] = 2.0
    assert cache.has("train", "k1")
    assert cache.meta("train", "k1") == {"a": 1, "seconds": 2.0}
    assert (cache.path("train", "k1") / "model.pt").read_text() == "whole"


def test_scratch_survives_failure_and_is_removed_on_success(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    scratch = cache.scratch("train", "k")
    (scratch / "last.ckpt").write_text("epoch 3")
    with pytest.raises(KeyboardInterrupt):
        with cache.write("train", "k", {}):
            raise KeyboardInterrupt
    assert (scratch / "last.ckpt").exists()  # resume material kept
    with cache.write("train", "k", {}):
        pass
    assert not scratch.exists()


def test_store_upsert_replaces_whole_row_and_exports_csv(tmp_path: Path) -> None:
    with ResultStore(tmp_path / "r.db") as store:
        store.upsert({"point_key": "p", "status": "failed", "error": "boom",
                      "config": {"x": 1}})
        first = store.get("p")
        store.upsert({"point_key": "p", "status": "ok", "latency_median_ms": 1.5,
                      "latency_samples_ms": [1.0, 1.5, 2.0]})
        row = store.get("p")
        assert row.status == "ok" and row.error is None
        assert row.latency_samples_ms == [1.0, 1.5, 2.0]
        assert row.created_at == first.created_at
        assert store.export_csv(tmp_path / "r.csv") == 1
        assert "latency_median_ms" in (tmp_path / "r.csv").read_text().splitlines()[0]
        with pytest.raises(ValueError, match="status must be one of"):
            store.upsert({"point_key": "q", "status": "great"})
        with pytest.raises(KeyError, match="unknown result columns"):
            store.upsert({"point_key": "q", "status": "ok", "latency": 1})


def test_older_database_gains_the_precision_columns(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the table as the first store wrote it
        conn.execute("CREATE TABLE points (point_key TEXT PRIMARY KEY, status TEXT NOT NULL, "
                     "accuracy REAL, created_at REAL, updated_at REAL)")
        conn.execute("INSERT INTO points VALUES ('old', 'ok', 0.9, 1.0, 1.0)")
    with ResultStore(path) as store:
        store.upsert({"point_key": "new", "status": "ok", "accuracy": None,
                      "accuracy_source": None, "precision": "int8", "compression_ratio": 4.0,
                      "ort_accuracy": 0.8, "verification_reference": "onnxruntime",
                      "fp32_top1_agreement": 0.95, "fp32_max_abs_diff": 0.1})
        old, new = store.get("old"), store.get("new")
    assert old.accuracy == 0.9 and old.precision is None
    assert new.accuracy is None and new.compression_ratio == 4.0
    assert new.ort_accuracy == 0.8 and new.verification_reference == "onnxruntime"
