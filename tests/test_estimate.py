"""`dlas plan --estimate`: measured costs rescaled, cached entries free, shared entries
once, N-worker bounds, the CLI. Pure: caches are fabricated, nothing is trained or built."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dlas.cli import main
from dlas.estimate import estimate_sweep
from dlas.estimate.costmodel import components
from dlas.estimate.render import duration
from dlas.estimate.schedule import CostedStage, simulate
from dlas.estimate.work import stage_work
from dlas.results.store import ResultRow, ResultStore
from dlas.stages import stage_keys
from dlas.sweep.config import parse_config
from dlas.sweep.grid import Point, expand
from tests.conftest import tiny_sweep


def _config(name: str = "est", epochs: int = 1, algorithms: tuple[str, ...] = ("direct",
                                                                               "gemm")):
    text = tiny_sweep(name, algorithms=list(algorithms)).replace("epochs: 1\n",
                                                                 f"epochs: {epochs}\n", 1)
    return parse_config(text)


def _store(ws: Path, point: Point, stage: str, seconds: float, **facts: object) -> None:
    """A computed cache entry of `point`'s `stage`, and the result row that says what it was."""
    key = dict(stage_keys(point).items())[stage]
    entry = ws / "cache" / stage / key
    entry.mkdir(parents=True, exist_ok=True)
    (entry / "meta.json").write_text(json.dumps({"stage": stage, "key": key,
                                                 "seconds": seconds, **facts}))
    with ResultStore(ws / "results.db") as store:
        store.upsert(ResultRow(point_key=point.key, sweep="earlier", status="ok", config={
            "choices": {layer: c.identity() for layer, c in point.choices.items()},
            "budgets": point.budgets.model_dump(mode="json")}))


def _estimate(ws: Path, config, workers: int = 1):  # noqa: ANN001, ANN202
    return estimate_sweep(config, ws / "cache", ws / "results.db", workers=workers)


def _counts(est) -> dict[str, tuple[int, int]]:  # noqa: ANN001
    return {s.stage: (s.compute, s.cached) for s in est.stages}


def test_empty_workspace_uses_the_builtin_model_and_counts_shared_stages_once(
        tmp_path: Path) -> None:
    est = _estimate(tmp_path, _config())
    # two algorithms share one trained, compressed, imported model
    assert _counts(est) == {"data": (1, 0), "train": (1, 0), "compress": (1, 0),
                            "import": (1, 0), "compile": (2, 0), "measure": (2, 0)}
    assert est.measured_s == 0 and est.total_s > 0
    assert est.builtin_s == pytest.approx(est.total_s)
    assert est.total_s == pytest.approx(sum(s.seconds for s in est.stages))


def test_cached_entries_cost_nothing(tmp_path: Path) -> None:
    config = _config()
    point = expand(config)[0]
    _store(tmp_path, point, "train", 50.0, macs=1000)
    est = _estimate(tmp_path, config)
    assert _counts(est)["train"] == (0, 1)
    assert all(t.stage != "train" for t in est.tasks)
    compress = next(t for t in est.tasks if t.stage == "compress")
    assert [est.tasks[d].stage for d in compress.deps] == ["data"]  # waits on data only


def test_measured_costs_are_used_and_rescaled(tmp_path: Path) -> None:
    first = expand(_config("first", epochs=1))[0]
    _store(tmp_path, first, "train", 40.0)
    _store(tmp_path, first, "compile", 9.0, tuning_s=0.0, tuning=None)
    est = _estimate(tmp_path, _config("second", epochs=3))  # other keys, same options
    train = next(t for t in est.tasks if t.stage == "train")
    second = expand(_config("second", epochs=3))[0]
    ratio = (components(stage_work(second, "train", "k"))["train"]
             / components(stage_work(first, "train", "k"))["train"])
    assert ratio > 1  # three times the epochs
    assert train.seconds == pytest.approx(40.0 * ratio) and train.builtin_s == 0
    assert "measured" in train.basis
    # the compile of `direct` is measured (same algorithm); `gemm`'s is not
    compiles = {t.point.split(" / ")[3]: t for t in est.tasks if t.stage == "compile"}
    assert compiles["direct"].builtin_s == 0 and compiles["direct"].measured_s > 0
    assert compiles["gemm"].measured_s == 0 and compiles["gemm"].builtin_s > 0
    assert 0 < est.measured_s < est.total_s


def test_compile_parts_rescale_apart(tmp_path: Path) -> None:
    """A measured untuned compile says nothing about tuning: that part stays built-in."""
    base = expand(_config("a", algorithms=("direct",)))[0]
    _store(tmp_path, base, "compile", 6.0, tuning_s=0.0, tuning=None)
    tuned = parse_config(tiny_sweep("b").replace("tuning: [none]",
                                                 "tuning: [{name: metaschedule, params: "
                                                 "{trials: 40}}]"))
    est = _estimate(tmp_path, tuned)
    compile_ = next(t for t in est.tasks if t.stage == "compile")
    assert compile_.measured_s == pytest.approx(6.0)  # same algorithm and model: x1
    assert compile_.builtin_s == pytest.approx(components(stage_work(
        expand(tuned)[0], "compile", "k"))["tuning"])


def test_measure_learns_the_quiet_machine_cost(tmp_path: Path) -> None:
    """Seconds a measurement spent waiting for a busy machine are not learned."""
    config = _config(algorithms=("direct",))
    point = expand(config)[0]
    _store(tmp_path, point, "measure", 25.0, noise={"extra_s": 20.0})
    other = parse_config(tiny_sweep("more-runs").replace("measure_repeat: 5",
                                                         "measure_repeat: 6"))
    measure = next(t for t in _estimate(tmp_path, other).tasks if t.stage == "measure")
    ratio = (components(stage_work(expand(other)[0], "measure", "k"))["measure"]
             / components(stage_work(point, "measure", "k"))["measure"])
    # each of the default 3 passes costs what the stored pass did, rescaled
    assert measure.measured_s == pytest.approx(5.0 * ratio * other.budgets.timing_passes)


def test_failed_points_are_skipped_like_the_runner_does(tmp_path: Path) -> None:
    config = _config(algorithms=("direct",))
    point = expand(config)[0]
    with ResultStore(tmp_path / "results.db") as store:
        store.upsert(ResultRow(point_key=point.key, sweep="est", status="failed"))
    est = _estimate(tmp_path, config)
    assert est.skipped_failed == 1 and est.runnable == 0 and not est.tasks


def test_schedule_bounds() -> None:
    # a root feeding two chains and a lone task
    tasks = [CostedStage("a", 2.0), CostedStage("b", 5.0, (0,)), CostedStage("c", 1.0, (1,)),
             CostedStage("d", 3.0, (0,)), CostedStage("e", 4.0)]
    serial = sum(t.seconds for t in tasks)
    one = simulate(tasks, 1)
    assert one.makespan_s == pytest.approx(serial)
    assert one.critical_path_s == pytest.approx(8.0) and one.critical_path == (0, 1, 2)
    for n in (2, 3, 8):
        result = simulate(tasks, n)
        assert one.critical_path_s - 1e-9 <= result.makespan_s <= serial + 1e-9
    assert simulate(tasks, 8).makespan_s == pytest.approx(8.0)
    with pytest.raises(ValueError):
        simulate(tasks, 0)


def test_n_workers_between_critical_path_and_serial(tmp_path: Path) -> None:
    est = _estimate(tmp_path, _config(algorithms=("direct", "gemm", "spatial_pack")), 4)
    eps = 1e-9 * est.total_s
    assert est.parallel.critical_path_s - eps <= est.parallel.makespan_s <= est.total_s + eps
    assert est.serial.makespan_s == pytest.approx(est.total_s)


def test_duration_is_human() -> None:
    assert duration(5) == "5.0 s" and duration(42) == "42 s"
    assert duration(600) == "10.0 min" and duration(7200) == "2.0 h"
    assert duration(10 * 86400) == "10.0 d"
    assert "months" in duration(90 * 86400)


def test_cli_plan_estimate(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep("cli-est", algorithms=["direct", "gemm"]))
    ws = ["--workspace", str(tmp_path / "ws")]
    assert main(["plan", str(config), "--estimate", "--workers", "2", *ws]) == 0
    out = capsys.readouterr().out
    for row in ("train", "compile", "measure", "total", "on 2 workers", "critical path"):
        assert row in out, row
    assert main(["plan", str(config), "--workers", "3", "--json", *ws]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parallel"]["workers"] == 3 and data["total_s"] > 0


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_cli_bad_workers_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                workers: str) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep("bad"))
    argv = ["plan", str(config), "--estimate", "--workers", workers,
            "--workspace", str(tmp_path / "ws")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert f"--workers {workers}" in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err


def test_timing_passes_multiply_the_timing_stages_only(tmp_path: Path) -> None:
    """budgets.timing_passes: 3 times every point three times (`dlas.runner.passes`),
    each pass taking a third of its samples; passes after the first re-check one input
    instead of verifying in full, and cost `LATER_PASS_SHARE` of it: training and compiling
    are the same; the point keys do not change (a cached sweep is not redone for it)."""
    from dlas.estimate.costmodel import LATER_PASS_SHARE

    def passes(n: int) -> Any:
        return parse_config(tiny_sweep("est", algorithms=["direct", "gemm"]).replace(
            "budgets:\n", f"budgets:\n  timing_passes: {n}\n  measure_repeat: 300\n", 1)
            .replace("  measure_repeat: 5\n", ""))

    one, three = passes(1), passes(3)
    assert three.budgets.timing_passes == 3 and _config().budgets.timing_passes == 3
    assert [p.key for p in expand(one)] == [p.key for p in expand(three)]
    by_one = {s.stage: s.seconds for s in _estimate(tmp_path, one).stages}
    by_three = {s.stage: s.seconds for s in _estimate(tmp_path, three).stages}
    assert by_one["measure"] < by_three["measure"] < 3 * by_one["measure"]
    first = _estimate(tmp_path, three).tasks
    assert any(f"3 passes (built in x{1 + 2 * LATER_PASS_SHARE:g})" in t.basis
               for t in first if t.stage == "measure")
    assert by_three["train"] == pytest.approx(by_one["train"])
    assert by_three["compile"] == pytest.approx(by_one["compile"])


def test_a_slower_machine_stretches_the_training_macs_only(tmp_path: Path) -> None:
    """`mac_scale` (`dlas.estimate.machine_speed`): the built-in training and fine-tuning
    cost's per-MAC term scales with it; compile and measure do not move."""
    from dlas.estimate import costmodel

    point = expand(_config(epochs=2))[0]
    train = stage_work(point, "train", "k")
    slow, nominal = components(train, 2.0)["train"], components(train)["train"]
    images = train.train_images * train.epochs + train.test_images * costmodel.FORWARD_SHARE
    assert slow - nominal == pytest.approx(images * costmodel.TRAIN_S_PER_MAC_IMAGE * train.macs)
    compile_ = stage_work(point, "compile", "k")
    assert components(compile_, 2.0) == components(compile_)

    def by_stage(scale: float) -> dict[str, float]:
        est = estimate_sweep(_config(epochs=2), tmp_path / "cache", tmp_path / "results.db",
                             mac_scale=scale)
        return {s.stage: s.seconds for s in est.stages}

    one, two = by_stage(1.0), by_stage(2.0)
    assert two["train"] > one["train"] and two["compile"] == one["compile"]
    assert two["measure"] == one["measure"]


def test_a_faster_core_shrinks_the_serial_work_and_not_the_training_macs(
        tmp_path: Path) -> None:
    """`serial_scale`: compiling, importing, measuring, the baselines and training's
    per-layer and fixed work scale with it, and so do tuning trials (builds and search);
    training's per-MAC term does not (that is `mac_scale`'s), nor does a tuning session's
    fixed start (mostly timing the minimal candidates)."""
    from dlas.estimate import costmodel

    point = expand(_config(epochs=2))[0]
    compile_ = stage_work(point, "compile", "k")
    half = components(compile_, 1.0, 0.5)
    assert half == {part: s / 2 for part, s in components(compile_).items()}
    tuned = replace(compile_, trials=256)
    fixed = costmodel.TUNING_FIXED_S
    assert components(tuned, 1.0, 0.5)["tuning"] - fixed == pytest.approx(
        (components(tuned)["tuning"] - fixed) / 2)
    assert components(tuned, 1.0, 0.5)["compile"] == components(tuned)["compile"] / 2
    train = stage_work(point, "train", "k")
    images = train.train_images * train.epochs + train.test_images * costmodel.FORWARD_SHARE
    macs = images * costmodel.TRAIN_S_PER_MAC_IMAGE * train.macs
    assert components(train, 1.0, 0.5)["train"] - macs == pytest.approx(
        (components(train)["train"] - macs) / 2)

    def total(scale: float) -> float:
        return estimate_sweep(_config(epochs=2), tmp_path / "cache", tmp_path / "results.db",
                              serial_scale=scale).total_s

    assert total(0.5) < total(1.0)


def _bf16_config(precision: str = "bfloat16"):  # noqa: ANN202
    text = tiny_sweep("bf16", compression=["none", "weight_pruning"])
    text = text.replace("budgets:\n", f"budgets:\n  train_precision: {precision}\n", 1)
    return parse_config(text)


def test_a_bfloat16_fit_divides_the_training_step_by_its_speedup() -> None:
    """`budgets.train_precision` bfloat16: train and fine-tuning steps (per-layer and per-MAC
    terms alike) cost `bf16_speedup` times less; the fixed work, and every other stage, do
    not move; a float32 sweep ignores the speedup."""
    from dlas.estimate import costmodel

    bf16 = [p for p in expand(_bf16_config()) if p.compression.name == "weight_pruning"][0]
    train, compress = stage_work(bf16, "train", "k"), stage_work(bf16, "compress", "k")
    assert train.fit_precision == compress.fit_precision == "bfloat16"
    assert stage_work(bf16, "compile", "k").fit_precision == "float32"
    nominal, fast = components(train)["train"], components(train, bf16_speedup=2.0)["train"]
    fixed = costmodel.TRAIN_FIXED_S
    assert fast - fixed == pytest.approx((nominal - fixed) / 2)
    compile_ = stage_work(bf16, "compile", "k")
    assert components(compile_, bf16_speedup=2.0) == components(compile_)
    fp32 = stage_work(expand(_bf16_config("float32"))[0], "train", "k")
    assert fp32.fit_precision == "float32"
    assert components(fp32, bf16_speedup=2.0) == components(fp32)
    # auto: bf16 only where the CPU has it (the fit's own record wins where there is one)
    assert stage_work(bf16, "train", "k", facts={"fit_precision": "float32"}
                      ).fit_precision == "float32"


def test_a_measured_bfloat16_fit_rescales_to_float32_by_the_speedup() -> None:
    """A bf16 fit measured in the workspace says what a float32 one costs only multiplied
    back by the speedup (and the other way round); same precision, the ratio is the
    built-in model's alone."""
    from dlas.estimate.estimate import cost_of
    from dlas.estimate.measured import Measured

    bf16 = stage_work(expand(_bf16_config())[0], "train", "k")
    fp32 = replace(bf16, fit_precision="float32")
    sample = Measured(bf16, {"train": 30.0}, components(bf16))
    assert cost_of(fp32, [sample], bf16_speedup=1.5)[0] == pytest.approx(45.0)
    assert cost_of(bf16, [sample], bf16_speedup=1.5)[0] == pytest.approx(30.0)
    back = Measured(fp32, {"train": 45.0}, components(fp32))
    assert cost_of(bf16, [back], bf16_speedup=1.5)[0] == pytest.approx(30.0)


def test_the_machine_probes_give_bounded_scales() -> None:
    from dlas.estimate.machine_speed import (
        LIMITS,
        bf16_step_speedup,
        compile_seconds,
        conv_gmacs,
        serial_scale,
        serial_seconds,
        training_mac_scale,
        training_step_seconds,
    )

    assert conv_gmacs(seconds=0.05) > 0 and serial_seconds(seconds=0.02) > 0
    steps = training_step_seconds(seconds=0.02)
    assert set(steps) == {"float32", "bfloat16"} and all(0 < s < 10 for s in steps.values())
    assert LIMITS[0] <= bf16_step_speedup() <= LIMITS[1]
    build = compile_seconds(seconds=0.02)
    assert build is not None and 0 < build < 10
    assert LIMITS[0] <= training_mac_scale() <= LIMITS[1]
    assert LIMITS[0] <= serial_scale() <= LIMITS[1]


@pytest.mark.parametrize("name", ["DLAS_MAC_SCALE", "DLAS_SERIAL_SCALE", "DLAS_BF16_SPEEDUP"])
def test_a_bad_machine_scale_in_the_environment_exits_2(tmp_path: Path, name: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "sweep.yaml"
    # the bf16 speedup is read only for a sweep that fits in bfloat16
    config.write_text(tiny_sweep("scale").replace("budgets:\n",
                                                  "budgets:\n  train_precision: bfloat16\n", 1))
    monkeypatch.setenv(name, "fast")
    assert main(["plan", str(config), "--estimate", "--workspace", str(tmp_path / "ws")]) == 2
    captured = capsys.readouterr()
    assert f"{name}='fast'" in captured.out + captured.err


def test_smaller_images_cost_less_to_train_and_the_search_share_grows_with_population(
        ) -> None:
    """The estimate builds the model for the dataset's image size (digits' image_size): at
    16x16 a fit costs its MACs' quarter and 70% of the per-layer term (its fixed share
    kept); a tuned compile's trials cost more per trial with more candidates scored per
    measured one (population / trials per round)."""
    from dlas.estimate import costmodel
    from dlas.estimate.work import dataset_input

    def point(text: str) -> Point:
        return expand(parse_config(text))[0]

    base = tiny_sweep("img")
    small = base.replace("datasets: [digits]",
                         "datasets: [{name: digits, params: {image_size: 16}}]")
    assert dataset_input(point(base)) == ((3, 32, 32), 10)
    assert dataset_input(point(small)) == ((3, 16, 16), 10)
    big_fit, small_fit = (stage_work(point(t), "train", "k") for t in (base, small))
    assert small_fit.macs < big_fit.macs / 3 and small_fit.input_pixels == 256
    per_conv = costmodel.TRAIN_S_PER_CONV_IMAGE * small_fit.convs
    no_macs = [replace(w, macs=0) for w in (big_fit, small_fit)]
    fixed = costmodel.TRAIN_FIXED_S
    big_s, small_s = (components(w)["train"] - fixed for w in no_macs)
    share = costmodel.CONV_FIXED_SHARE + (1 - costmodel.CONV_FIXED_SHARE) / 4
    assert small_s == pytest.approx(big_s * share) and big_s > per_conv

    tuned = replace(stage_work(point(base), "compile", "k"), trials=64)
    wide = replace(tuned, search_per_trial=8.0)
    narrow = replace(tuned, search_per_trial=2.0)
    assert components(wide)["tuning"] - components(narrow)["tuning"] == pytest.approx(
        64 * costmodel.TRIAL_SEARCH_S * 6)


def test_compile_helpers_take_untuned_compiles_off_the_wall_clock(tmp_path: Path) -> None:
    """A local run's compile helpers compile a model's other points beside its own: an
    untuned compile's entry costs `helper_factor` of itself, a tuned one and every other
    stage its whole (the helper never tunes, trains or times)."""
    from dlas.estimate.costmodel import helper_factor

    config = _config(algorithms=("direct", "gemm"))
    alone = {t.key: t for t in _estimate(tmp_path, config).tasks}
    beside = {t.key: t for t in estimate_sweep(config, tmp_path / "cache",
                                               tmp_path / "results.db", helpers=1).tasks}
    assert 0.5 < helper_factor(1) < 1.0 == helper_factor(0) and helper_factor(3) < helper_factor(1)
    for key, task in alone.items():
        want = task.seconds * (helper_factor(1) if task.stage == "compile" else 1.0)
        assert beside[key].seconds == pytest.approx(want), task.stage
    assert sum(t.stage == "compile" for t in alone.values()) == 2


def test_a_dense_compile_of_another_weight_set_costs_the_linking_share(tmp_path: Path) -> None:
    """A dense algorithm's kernels on pruned weights are the unpruned model's
    (`dlas.compiler.kernel_objects`): its compile is linked, not built, and costs
    KERNELS_REUSED_SHARE of the first; a CSR compile builds its own."""
    from dlas.estimate.costmodel import KERNELS_REUSED_SHARE

    config = parse_config(tiny_sweep("reuse", compression=["none", "weight_pruning"],
                                     algorithms=["direct", "direct_csr"]))
    compiles = {t.point: t for t in _estimate(tmp_path, config).tasks if t.stage == "compile"}
    layers = {tuple(p.split(" / ")[2:4]): t for p, t in compiles.items()}
    dense, pruned, csr = ([layers[c]] for c in (("none", "direct"),
                                                 ("weight_pruning", "direct"),
                                                 ("weight_pruning", "direct_csr")))
    assert len(dense) == len(pruned) == len(csr) == 1
    assert pruned[0].seconds == pytest.approx(dense[0].seconds * KERNELS_REUSED_SHARE)
    assert csr[0].seconds > dense[0].seconds
    # a measured linked compile stands for a built one at the share's ratio
    point = next(p for p in expand(config) if p.algorithms.name == "direct"
                 and p.compression.name == "weight_pruning")
    work = stage_work(point, "compile", "k", facts={"kernels_reused": True})
    built = replace(work, kernels_reused=False)
    assert components(work)["compile"] == pytest.approx(
        components(built)["compile"] * KERNELS_REUSED_SHARE)
