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


# --- checksums: an entry is what was written, or it is not used ----------------------------

def _entry(cache: Cache, stage: str = "compile", key: str = "k") -> Path:
    with cache.write(stage, key, {"stage": stage}) as tmp:
        (tmp / "model.so").write_bytes(bytes(range(256)) * 40)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "params.npz").write_bytes(b"p" * 100)
    return cache.path(stage, key)


def test_entry_carries_a_manifest_of_its_files(tmp_path: Path) -> None:
    import json

    cache = Cache(tmp_path)
    folder = _entry(cache)
    listed = json.loads((folder / "manifest.json").read_text())["files"]
    assert sorted(listed) == ["meta.json", "model.so", "sub/params.npz"]
    assert listed["model.so"]["size"] == 256 * 40
    check = cache.check("compile", "k")
    assert check.usable and check.verdict.verified and not check.unverified
    assert cache.has("compile", "k")


@pytest.mark.parametrize("damage, expected", [
    (lambda f: (f / "model.so").write_bytes((f / "model.so").read_bytes()[:1000]),
     "model.so: size 1000 bytes, written with 10240"),
    (lambda f: (f / "sub" / "params.npz").write_bytes(b"p" * 36 + b"\0" * 64),
     "sub/params.npz: content differs from what was written (sha256 mismatch"),
    (lambda f: (f / "model.so").unlink(), "model.so: missing"),
    (lambda f: (f / "meta.json").write_text('{"stage": "compile", "x": 1}'),
     "meta.json: size"),
    (lambda f: (f / "manifest.json").write_text("{not json"), "manifest.json: unreadable"),
])
def test_damaged_entry_is_not_cached(tmp_path: Path, damage, expected: str) -> None:
    cache = Cache(tmp_path)
    folder = _entry(cache)
    damage(folder)
    check = cache.check("compile", "k")
    assert check.present and check.damaged and not check.usable
    assert expected in check.describe()
    assert check.describe().startswith("compile k (")
    assert not cache.has("compile", "k")
    assert cache.discard("compile", "k")  # a damaged entry can be discarded
    assert not cache.check("compile", "k").present


def test_entry_from_before_manifests_is_used_unverified(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    folder = _entry(cache)
    (folder / "manifest.json").unlink()  # as every entry written before manifests
    (folder / "model.so").write_bytes(b"anything")  # nothing to compare it with
    check = cache.check("compile", "k")
    assert check.usable and check.unverified and cache.has("compile", "k")
    (folder / "meta.json").write_text('{"stage": "comp')  # but a torn meta.json is damage
    check = cache.check("compile", "k")
    assert check.damaged and "meta.json: unreadable" in check.describe()


def test_a_stage_cannot_overwrite_the_manifest(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    with pytest.raises(RuntimeError, match="wrote a file named manifest.json"):
        with cache.write("compile", "k", {}) as tmp:
            (tmp / "manifest.json").write_text("{}")
    assert not cache.exists("compile", "k")


def test_seal_finds_a_damaged_file(tmp_path: Path) -> None:
    from dlas.integrity import check_seal, remove_sealed, seal_path, write_seal

    ckpt = tmp_path / "last.ckpt"
    partial = tmp_path / "last.ckpt.partial"
    partial.write_bytes(b"x" * 4096)
    write_seal(partial, for_name=ckpt)  # sealed under its final name before the rename
    partial.rename(ckpt)
    verdict = check_seal(ckpt)
    assert verdict.verified and verdict.intact
    data = bytearray(ckpt.read_bytes())
    data[1000:1064] = bytes(64)
    ckpt.write_bytes(bytes(data))
    verdict = check_seal(ckpt)
    assert not verdict.intact and "sha256 mismatch" in verdict.describe()
    remove_sealed(ckpt)
    assert not ckpt.exists() and not seal_path(ckpt).exists()
    ckpt.write_bytes(b"old")  # no seal: unverified, nothing to say it is damaged
    assert check_seal(ckpt) == type(verdict)(verified=False)
