"""The measurement method end to end: each model's variants timed in a fresh, pinned
worker, interleaved in rounds labelled with the vCPU placement; every row with a
confidence interval; a noisy point flagged (a wide interval, or rounds kept on a busy
machine) without the thresholds or budgets touching any cached stage or point key; and
`--remeasure` / `--remeasure-noisy` adding timing runs to the history. The sampler:
tests/test_rounds.py; the statistics: tests/test_statistics.py."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.stages import stage_keys, verified
from dlas.sweep.config import Budgets, ConfigError, parse_config
from dlas.sweep.grid import UNKEYED_BUDGETS, digest, expand
from dlas.tuning.baselines.base import time_peer
from tests.conftest import tiny_sweep


def test_time_peer_discards_warmup_and_averages_number_calls() -> None:
    calls: list[int] = []
    samples = time_peer(lambda: calls.append(1), repeat=4, number=3, warmup=2)
    assert len(samples) == 4 and len(calls) == 2 + 4 * 3
    assert all(s >= 0 for s in samples)
    with pytest.raises(ValueError):
        time_peer(lambda: None, repeat=0)


def test_timing_passes_share_the_points_rounds_samples_and_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Three passes by default, each run taking its share of the point's budgets (at
    least 4 rounds), so three short runs minutes apart cost about 1.5x one long one."""
    from types import SimpleNamespace

    monkeypatch.undo()  # the suite's caps (conftest) off: the policy a sweep gets
    from dlas.runner.timing_groups import rounds_policy

    def policy(**budgets: Any) -> tuple[int, int, float]:
        p = rounds_policy(SimpleNamespace(budgets=Budgets(**budgets)))  # type: ignore[arg-type]
        return p.samples, p.min_rounds, p.placement_budget_s

    assert Budgets().timing_passes == 3
    assert policy() == (50, 4, 10.0)
    assert policy(timing_passes=1) == (150, 10, 30.0)  # one long run, as before
    assert policy(timing_passes=2) == (75, 5, 15.0)
    assert policy(timing_passes=3, timing_rounds=20)[1] == 7
    assert policy(timing_passes=6)[:2] == (25, 4)  # never under 4 rounds a pass
    assert policy(timing_passes=3, timing_rounds=3)[1] == 3  # nor over the rounds asked
    # a profile is one run, not a pass: the whole budgets
    assert rounds_policy(SimpleNamespace(budgets=Budgets()), 1).min_rounds == 10  # type: ignore[arg-type]


def test_timing_budgets_are_documented_and_outside_every_key() -> None:
    b = Budgets()
    assert (b.ci_threshold, b.timing_rounds, b.placement_wait_s) == (0.10, 10, 30.0)
    assert (b.noise_retries, b.noise_budget_s) == (5, 20.0)
    assert "confidence interval" in Budgets.model_fields["ci_threshold"].description
    assert "near placement" in Budgets.model_fields["placement_wait_s"].description
    assert "busy" in Budgets.model_fields["noise_budget_s"].description
    text = tiny_sweep(algorithms=["direct"]).replace("tuning: [none]",
                                                     "tuning: [none, onnxruntime]")
    loose = expand(parse_config(text.replace(
        "verify_samples: 4", "verify_samples: 4\n  ci_threshold: 0.5\n  noise_retries: 0"
    ).replace("timing_rounds: 2", "timing_rounds: 7").replace("placement_wait_s: 0",
                                                             "placement_wait_s: 5")))
    default = expand(parse_config(text))
    assert [p.budgets.ci_threshold for p in loose] == [0.5, 0.5]
    assert [p.budgets.timing_rounds for p in loose] == [7, 7]
    assert [p.budgets.placement_wait_s for p in loose] == [5.0, 5.0]
    for a, b2 in zip(default, loose, strict=True):
        assert a.key == b2.key and stage_keys(a) == stage_keys(b2)
        # the point key is the one a checkout without these budgets computed
        before = {k: v for k, v in a.budgets.model_dump(mode="json").items()
                  if k not in UNKEYED_BUDGETS}
        assert a.key == digest({"choices": {layer: c.identity()
                                            for layer, c in a.choices.items()},
                                "budgets": before})


def test_the_old_noise_threshold_is_refused_with_what_replaced_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ci_threshold"):
        parse_config(tiny_sweep().replace("verify_samples: 4",
                                          "verify_samples: 4\n  cv_threshold: 0.1"))


def run(text: str, root: Path, cache: Path) -> RunReport:
    return Runner(Workspace(root, cache), progress=False).run(parse_config(text))


def test_every_row_has_an_interval_and_a_new_threshold_recomputes_nothing(
        tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture) -> None:
    text = tiny_sweep().replace("tuning: [none]", "tuning: [none, pytorch]")
    first = run(text, tmp_path, shared_cache)
    assert first.ok == 2
    for row in first.rows:
        reason = row.noise_reason or ""
        assert row.latency_ci_low_ms <= row.latency_median_ms <= row.latency_ci_high_ms
        # with 2 rounds and no wait for a placement, the vCPUs may move under every chunk:
        # then the row says so and is noisy
        steady = row.placement in ("near", "far")
        assert steady or "no round had a steady placement" in reason
        assert row.timing_rounds >= 1
        assert row.latency_by_placement[row.placement]["median_ms"] == \
            pytest.approx(row.latency_median_ms)
        loaded = bool(row.loaded_rounds)  # other suites may share this machine
        wide = row.ci_relative_width > 0.10
        few = row.timing_rounds < 2  # the sweep asks for 2: a busy machine discarded some
        assert row.noisy == int(bool(reason))  # flagged exactly when a reason is given
        if loaded or wide or few or not steady:
            assert row.noisy == 1
        assert few == ("fewer than the 2 asked for" in reason)
    capsys.readouterr()

    # forced noisy: no interval is narrower than zero
    strict = text.replace("verify_samples: 4", "verify_samples: 4\n  ci_threshold: 0")
    second = run(strict, tmp_path, shared_cache)
    assert second.ok == 2 and second.recomputed_nothing  # no stage re-ran for the flag
    out = capsys.readouterr().out
    with ResultStore(tmp_path / "results.db") as store:
        stored = store.rows()
        assert all(len(store.timing_runs(r.point_key, r.timing_key)) == 1 for r in stored)
    assert len(stored) == 2  # the same points, their rows rewritten
    for row in stored:
        assert row.noisy == 1
        # a row a busy machine left with one usable round has a zero-width interval: it is
        # flagged for resting on too few rounds instead
        if row.timing_rounds >= 2:
            assert "of the median > 0%" in row.noise_reason
        else:
            assert "fewer than the 2 asked for" in row.noise_reason
    assert "noisy (" in out and "95% CI" in out


@pytest.fixture
def busy_loop() -> Iterator[subprocess.Popen]:
    """A process spinning on one CPU, returned once it burns it: a real busy machine."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum(psutil.Process(proc.pid).cpu_times()[:2]) < 0.1:
        time.sleep(0.02)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_busy_machine_flags_tvm_and_baseline_rows_and_says_so(
        tmp_path: Path, shared_cache: Path, busy_loop: subprocess.Popen,
        capsys: pytest.CaptureFixture) -> None:
    text = tiny_sweep().replace("tuning: [none]", "tuning: [none, onnxruntime]").replace(
        "noise_budget_s: 1", "noise_budget_s: 0").replace(
        "measure_repeat: 5", "measure_repeat: 7")  # a timing no other test cached
    report = run(text, tmp_path, shared_cache)
    assert report.ok == 2
    out = capsys.readouterr().out
    for row in report.rows:
        assert row.noisy == 1 and row.loaded_rounds >= row.timing_rounds >= 1
        assert row.load_other_cores >= 0.5
        assert "taken while other processes kept the CPUs busy" in row.noise_reason
    assert "busy machine" in out.split("results of this sweep")[1]


def test_remeasure_noisy_then_remeasure_keep_every_run(
        tmp_path: Path, shared_cache: Path, busy_loop: subprocess.Popen,
        capsys: pytest.CaptureFixture) -> None:
    from dlas.cli import main

    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep().replace("noise_budget_s: 1", "noise_budget_s: 0").replace(
        "measure_repeat: 5", "measure_repeat: 9"))  # a timing no other test cached
    args = ["run", str(config), "--no-progress", "--workspace", str(tmp_path / "ws"),
            "--cache-dir", str(shared_cache)]
    assert main(args) == 0
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        (busy,) = store.rows()
    assert busy.noisy == 1 and busy.loaded_rounds >= busy.timing_rounds >= 1

    assert main(args) == 0  # a plain re-run reuses the noisy timing
    capsys.readouterr()
    busy_loop.kill()
    busy_loop.wait()  # the machine is quiet now
    assert main([*args, "--remeasure-noisy"]) == 0
    out = capsys.readouterr().out
    assert "re-measuring 1 point(s) flagged noisy" in out
    assert "compile   reused" in out and "timing    1 variant(s)" in out
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        (quiet,) = store.rows()
        runs = store.timing_runs(quiet.point_key, quiet.timing_key)
    assert quiet.point_key == busy.point_key and quiet.timing_runs == 2
    assert [r.source for r in runs] == ["sweep", "remeasure"]
    # the figures come from the clean run only (other suites may load this machine too)
    if not runs[1].loaded_rounds():
        assert quiet.loaded_rounds == 0 and "busy" not in (quiet.noise_reason or "")

    assert main([*args, "--remeasure"]) == 0  # every point, noisy or not
    assert "re-measuring 1 point(s) in fresh timing workers" in capsys.readouterr().out
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        (again,) = store.rows()
        assert len(store.timing_runs(again.point_key, again.timing_key)) == 3
    assert again.timing_runs == 3
    assert main([*args, "--remeasure", "--remeasure-noisy"]) == 2  # one or the other

    # --passes N with --remeasure: N more timing runs, one pass after the other
    assert main([*args, "--remeasure", "--passes", "2"]) == 0
    out = capsys.readouterr().out
    assert "(timing pass 1 of 2)" in out and "(timing pass 2 of 2)" in out
    with ResultStore(tmp_path / "ws" / "results.db") as store:
        (twice,) = store.rows()
        runs = store.timing_runs(twice.point_key, twice.timing_key)
    assert twice.timing_runs == 5 and [r.source for r in runs[3:]] == ["remeasure"] * 2
    # each of the 2 passes took half the samples one pass took (9 asked: 5 each)
    assert runs[0].policy["samples"] == 9 and runs[3].policy["samples"] == 5
    assert runs[3].started_at < runs[4].started_at
    # a plain run in 6 passes times only what a point still owes: one run, then none
    for owed in (1, 0):
        assert main([*args, "--passes", "6"]) == 0
        out = capsys.readouterr().out
        assert ("timing 1 point(s) again (timing pass 6 of 6)" in out) == bool(owed)
        with ResultStore(tmp_path / "ws" / "results.db") as store:
            (row,) = store.rows()
            runs = store.timing_runs(row.point_key, row.timing_key)
        assert row.timing_runs == len(runs) == 6 and runs[-1].source == "sweep"
    for bad in ("0", "two"):
        with pytest.raises(SystemExit) as stopped:
            main([*args, "--remeasure", "--passes", bad])
        assert stopped.value.code == 2


def test_timing_passes_in_the_config_give_each_point_that_many_runs(
        tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture) -> None:
    """budgets.timing_passes: 2 times every point twice in one `dlas run`, the second
    pass after the first finished; a second run finds both runs and times nothing."""
    from dlas.cli import main

    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep().replace("budgets:\n", "budgets:\n  timing_passes: 2\n", 1)
                      .replace("measure_repeat: 5", "measure_repeat: 11"))  # not cached
    args = ["run", str(config), "--no-progress", "--workspace", str(tmp_path / "ws"),
            "--cache-dir", str(shared_cache)]
    for again in (False, True):
        assert main(args) == 0
        out = capsys.readouterr().out
        assert ("(timing pass 2 of 2)" in out) != again
        assert out.count("results of this sweep") == 1  # after the last pass only
        with ResultStore(tmp_path / "ws" / "results.db") as store:
            (row,) = store.rows()
            runs = store.timing_runs(row.point_key, row.timing_key)
        assert row.status == "ok" and row.timing_runs == len(runs) == 2
        assert [r.source for r in runs] == ["sweep", "sweep"]
        assert runs[0].started_at < runs[1].started_at
        # the second pass re-checked one input against the first pass's full check
        # (`dlas.stages.verified`), whose figures the row keeps
        assert row.verified == 1 and row.max_abs_diff is not None
        assert verified.record_path(shared_cache, "measure", row.timing_key).exists()
