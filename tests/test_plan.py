"""`dlas plan` of a large grid: a summary in seconds; small grids still list every point.

The summary's speed comes from not doing per-point work it does not need: no labels, no
table, each shared stage key computed once (`KeyMemo`), and no keys at all past the last
stage that has any cache entry. The tests count that work instead of timing it (timings
on a loaded 2-core machine are not a test), with one generous bound against a hang.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from dlas.cli import main
from dlas.runner.cache import Cache, CacheIndex
from dlas.runner.plan import SUMMARY_ABOVE, plan_points
from dlas.stages import MEASURE, KeyMemo, keys, stage_keys
from dlas.sweep.config import parse_config
from dlas.sweep.grid import Point, UndeclaredLayer, expand

WIDTHS = (0.25, 0.5, 0.75, 1.0, 0.125)


def big_sweep(targets: int, models: tuple[str, ...] = ("resnet18", "mobilenetv1",
                                                       "mobilenetv2", "vgg16")) -> str:
    """len(models) x 5 widths x 10 compressions x 6 algorithms x 4 tunings x `targets`
    points (4 models, 5 targets: 24,000), 15% of them not runnable (CSR on dense models)."""
    lines = ["name: big", "datasets: [digits]", "models:"]
    lines += [f"  - {{name: {m}, params: {{width_multiplier: {w}}}}}"
              for m in models for w in WIDTHS]
    lines += ["compression:", "  - none", "  - float16", "  - int8"]
    lines += [f"  - {{name: weight_pruning, params: {{sparsity: {s}}}}}"
              for s in (0.5, 0.7, 0.8, 0.9)]
    lines += [f"  - {{name: channel_pruning, params: {{level: {s}}}}}" for s in (0.1, 0.2, 0.3)]
    lines += ["algorithms: [direct, gemm, spatial_pack, direct_csr, gemm_csr, spatial_pack_csr]",
              "tuning:", "  - none"]
    lines += [f"  - {{name: metaschedule, params: {{trials: {t}}}}}" for t in (16, 64, 256)]
    lines += ["targets:"] + [f"  - {{name: host, params: {{threads: {t}}}}}"
                             for t in range(1, targets + 1)]
    return "\n".join(lines) + "\n"


class Spy:
    """Counts the per-point work of a plan: labels made, stage keys digested."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.labels = 0
        self.keys: Counter[str] = Counter()
        labels, stage_key = Point.labels, keys.stage_key

        def count_labels(point: Point) -> dict[str, str]:
            self.labels += 1
            return labels(point)

        def count_key(stage, point, parent):  # noqa: ANN001, ANN202 - the spied signature
            self.keys[stage.name] += 1
            return stage_key(stage, point, parent)

        monkeypatch.setattr(Point, "labels", count_labels)
        monkeypatch.setattr(keys, "stage_key", count_key)


def _plan(tmp_path: Path, text: str, *flags: str) -> list[str]:
    config = tmp_path / "big.yaml"
    config.write_text(text)
    return ["plan", str(config), "--workspace", str(tmp_path / "ws"), *flags]


def test_a_grid_of_tens_of_thousands_of_points_is_summarised(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch)
    started = time.perf_counter()
    assert main(_plan(tmp_path, big_sweep(targets=5))) == 0
    seconds = time.perf_counter() - started
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "sweep 'big': 24000 points"
    assert "  models        20  mobilenetv1 x5, mobilenetv2 x5, resnet18 x5, vgg16 x5" in lines
    assert "  targets        5  host x5" in lines
    assert "not runnable: 3600 points, by reason:" in lines
    assert any(ln.startswith("      400  algorithms 'direct_csr': CSR needs") for ln in lines)
    assert ("cache, of the 20400 runnable points: 0 with every stage cached, 0 partly "
            "cached, 20400 with nothing cached") in lines
    assert "24000 points: 20400 runnable, 3600 not runnable; cache" in out
    assert "--all` lists every point, `--json` prints them as JSON" in out
    assert len(lines) < 30  # no row per point
    # nothing per point that the summary does not show: no labels, and in an empty cache
    # no stage key at all (no stage has an entry any key could find)
    assert spy.labels == 0 and not spy.keys
    assert seconds < 60, f"dlas plan of 24,000 points took {seconds:.0f} s"


def _store(cache: Cache, stage: str, key: str) -> None:
    with cache.write(stage, key, {}):
        pass


def test_summary_counts_what_is_cached_computing_shared_keys_once(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    text = big_sweep(targets=1, models=("resnet18",))  # 1200 points, 1020 runnable
    points = [p for p in expand(parse_config(text)) if not p.blocked]
    cache = Cache(tmp_path / "ws" / "cache")
    first, second = stage_keys(points[0]), stage_keys(points[1])
    assert first.train == second.train  # most of the grid shares its first stages
    for stage, key in first.items()[1:]:
        _store(cache, stage, key)
    _store(cache, "train", second.train)  # points[1] shares all but compile and measure
    train_shared = sum(1 for p in points if stage_keys(p).train == first.train)
    distinct = {(s, k) for p in points for s, k in stage_keys(p).items()}

    spy = Spy(monkeypatch)
    assert main(_plan(tmp_path, text)) == 0
    out = capsys.readouterr().out
    assert (f"cache, of the 1020 runnable points: 1 with every stage cached, "
            f"{train_shared - 1} partly cached, {1020 - train_shared} with nothing cached"
            in out)
    # one key per distinct upstream prefix, one per point only where keys are per point
    per_stage = Counter(stage for stage, _ in distinct)
    assert spy.keys == per_stage and spy.keys["train"] == 5 and spy.keys["compile"] == 1020
    assert spy.labels == 0


def test_keys_stop_at_the_last_stage_with_entries(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    text = big_sweep(targets=1, models=("resnet18",))
    points = expand(parse_config(text))
    cache = Cache(tmp_path / "cache")
    _store(cache, "compress", stage_keys(next(p for p in points if not p.blocked)).compress)
    spy = Spy(monkeypatch)
    plans = plan_points(points, cache)
    assert set(spy.keys) == {"data", "train", "compress"}
    assert Counter(p.state for p in plans)["partly"] == 12  # 1 compression x 12 (algo, tuning)


def test_small_grid_lists_every_point_and_all_lists_a_large_one(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    small = "name: small\ndatasets: [digits]\nmodels: [resnet18]\nalgorithms: [direct, gemm]\n"
    assert main(_plan(tmp_path, small)) == 0
    out = capsys.readouterr().out
    assert "sweep 'small': 2 points" in out and out.count("nothing cached") == 2
    assert "2 points: 2 runnable, 0 not runnable" in out and "--all" not in out

    text = big_sweep(targets=1, models=("resnet18",)).replace(
        "[direct, gemm, spatial_pack, direct_csr, gemm_csr, spatial_pack_csr]", "[direct, gemm]")
    assert len(expand(parse_config(text))) == 400 > SUMMARY_ABOVE
    assert main(_plan(tmp_path, text, "--all")) == 0
    out = capsys.readouterr().out
    assert out.count("nothing cached") == 400 and "400 points: 400 runnable" in out


def test_json_lists_every_point(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(_plan(tmp_path, big_sweep(targets=1, models=("resnet18",)), "--json")) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["sweep"] == "big" and len(plan["points"]) == 1200
    first, blocked = plan["points"][0], plan["points"][12]  # direct_csr, dense
    assert first["choices"]["models"] == "resnet18(width_multiplier=0.25)"
    assert first["cache"] == "nothing" and first["stages"][-1] == "measure"
    assert blocked["choices"]["algorithms"] == "direct_csr" and not blocked["runnable"]
    assert "CSR needs" in blocked["not_runnable_reason"]


def test_plan_all_with_estimate_is_a_usage_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    assert main(_plan(tmp_path, big_sweep(1, ("resnet18",)), "--estimate", "--all")) == 2
    assert "give one of them" in capsys.readouterr().out


def test_memoised_keys_are_the_keys(tmp_path: Path) -> None:
    text = big_sweep(targets=2, models=("resnet18",)).replace(
        "  - none\n  - {name: metaschedule", "  - none\n  - onnxruntime\n  - {name: metaschedule")
    points = [p for p in expand(parse_config(text)) if not p.blocked]
    assert any(p.is_baseline for p in points)
    memo = KeyMemo()
    assert [stage_keys(p, memo) for p in points] == [stage_keys(p) for p in points]
    assert memo.computed == len({(s, k) for p in points for s, k in stage_keys(p).items()})


def test_a_stage_key_reading_an_undeclared_layer_fails_loudly(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What lets keys be shared is what each stage declares it reads; reading anything
    else must fail at once, not share a key between points that differ."""
    point = expand(parse_config("name: x\ndatasets: [digits]\nmodels: [resnet18]\n"))[0]
    monkeypatch.setattr(type(MEASURE), "reads", ())
    with pytest.raises(UndeclaredLayer, match="stage 'measure' key reads layer 'targets', "
                                              "but declares only the layers \\[\\]"):
        stage_keys(point)


def test_cache_index_agrees_with_the_cache(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    _store(cache, "train", "a" * 24)
    (tmp_path / "train" / ("b" * 24)).mkdir()  # a folder without meta.json: not an entry
    cache.scratch("train", "c" * 24)
    index = CacheIndex(cache)
    for key in ("a" * 24, "b" * 24, "c" * 24, "d" * 24):
        assert index.has("train", key) == cache.has("train", key)
    assert index.any("train") and not index.any("compile")
