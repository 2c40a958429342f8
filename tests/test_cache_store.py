"""The stage cache's atomicity and the results store."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from dlas.measure.record import TimingRound, TimingRun
from dlas.results.store import COLUMNS, JSON_COLUMNS, ResultRow, ResultStore
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
        store.upsert(ResultRow(point_key="p", status="failed", error="boom",
                               config={"x": 1}))
        first = store.get("p")
        store.upsert(ResultRow(point_key="p", status="ok", latency_median_ms=1.5,
                               latency_samples_ms=[1.0, 1.5, 2.0]))
        row = store.get("p")
        assert row is not None and first is not None
        assert row.status == "ok" and row.error is None and row.config is None
        assert row.latency_samples_ms == [1.0, 1.5, 2.0]
        assert row.created_at == first.created_at
        assert store.export_csv(tmp_path / "r.csv") == 1
        assert "latency_median_ms" in (tmp_path / "r.csv").read_text().splitlines()[0]
        with pytest.raises(TypeError, match="ResultRow"):
            store.upsert({"point_key": "q", "status": "ok"})  # type: ignore[arg-type]


def test_the_row_type_defines_the_columns_and_rejects_what_it_does_not_know() -> None:
    assert list(COLUMNS) == list(ResultRow.model_fields)
    assert COLUMNS["point_key"] == "TEXT PRIMARY KEY" and COLUMNS["status"] == "TEXT NOT NULL"
    assert COLUMNS["latency_median_ms"] == "REAL" and COLUMNS["timing_runs"] == "INTEGER"
    assert {"config", "latency_samples_ms", "latency_by_placement"} <= JSON_COLUMNS
    with pytest.raises(ValidationError, match="latency"):
        ResultRow(point_key="q", latency=1.0)  # a misspelled column is an error
    with pytest.raises(ValidationError):
        ResultRow(point_key="q", status="great")
    row = ResultRow(point_key="q")
    with pytest.raises(ValidationError):
        row.update(status="great")  # assignments are validated too


def test_older_database_gains_the_new_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the table as the first store wrote it, plus a
        # column a later version dropped
        conn.execute("CREATE TABLE points (point_key TEXT PRIMARY KEY, sweep TEXT, "
                     "status TEXT NOT NULL, accuracy REAL, loaded_samples INTEGER, "
                     "created_at REAL, updated_at REAL)")
        conn.execute("INSERT INTO points VALUES ('old', 'quick', 'ok', 0.9, 3, 1.0, 1.0)")
    with ResultStore(path) as store:
        store.upsert(ResultRow(point_key="new", status="ok", precision="int8",
                               compression_ratio=4.0, ort_accuracy=0.8,
                               verification_reference="onnxruntime"), sweep="quick")
        old, new = store.get("old"), store.get("new")
        assert old is not None and new is not None
        assert old.accuracy == 0.9 and old.precision is None and old.placement is None
        assert new.compression_ratio == 4.0 and new.verification_reference == "onnxruntime"
        # a row written before membership existed belongs to the sweep that wrote it
        assert {r.point_key for r in store.rows(sweep="quick")} == {"old", "new"}


def test_a_point_belongs_to_every_sweep_that_lists_it(tmp_path: Path) -> None:
    """Membership is many-to-many: a tuning sweep whose untuned point the quickstart
    measured first still lists it as its own, and the row keeps its first writer."""
    with ResultStore(tmp_path / "r.db") as store:
        store.upsert(ResultRow(point_key="untuned", sweep="quickstart", status="ok"))
        store.upsert(ResultRow(point_key="onnx", sweep="quickstart", status="ok"))
        store.upsert(ResultRow(point_key="tuned", sweep="tuning", status="ok"))
        store.upsert(ResultRow(point_key="untuned", sweep="tuning", status="ok"),
                     sweep="tuning")  # the tuning sweep's run rewrote it
        store.add_member("tuning", "onnx")  # reused without being rewritten
        assert {r.point_key for r in store.rows(sweep="tuning")} == {"untuned", "onnx",
                                                                     "tuned"}
        assert {r.point_key for r in store.rows(sweep="quickstart")} == {"untuned", "onnx"}
        assert store.get("untuned").sweep == "quickstart"  # type: ignore[union-attr]
        assert store.sweeps() == ["quickstart", "tuning"]
        assert len(store.rows()) == 3  # one row per point, whatever lists it


def test_timing_history_keeps_every_run_of_an_entry(tmp_path: Path) -> None:
    def run(run_id: str, at: float) -> TimingRun:
        return TimingRun(run_id=run_id, started_at=at, placement="near",
                         rounds=[TimingRound(index=0, placement="near", samples_ms=[1.0])])

    with ResultStore(tmp_path / "r.db") as store:
        assert store.add_timing_run("p", "k1", run("a", 1.0))
        assert not store.add_timing_run("p", "k1", run("a", 1.0))  # the same run once
        assert store.add_timing_run("p", "k1", run("b", 2.0))
        assert store.add_timing_run("p", "k2", run("c", 3.0))  # another entry (machine)
        assert [r.run_id for r in store.timing_runs("p", "k1")] == ["a", "b"]
        assert [r.run_id for r in store.timing_runs("p")] == ["a", "b", "c"]
        assert store.timing_runs("q") == []
