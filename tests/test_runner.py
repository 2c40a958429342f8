"""The runner end to end on a tiny sweep: real training, TVM compilation and timing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlas import registry
from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import RunReport, Workspace
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep


def run(text: str, root: Path, cache: Path | None = None, **kwargs) -> RunReport:
    runner = Runner(Workspace(root, cache), progress=False)
    return runner.run(parse_config(text), **kwargs)


def rows(root: Path) -> list[dict]:
    with ResultStore(root / "results.db") as store:
        return store.rows()


def test_sweep_records_verified_points_then_reuses_everything(tmp_path: Path) -> None:
    text = tiny_sweep(compression=["none", "weight_pruning"]).replace(
        "  - weight_pruning", "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}")
    first = run(text, tmp_path)
    assert (first.ok, first.failed, first.points) == (2, 0, 2)
    # one trained model feeds both compressions
    assert first.computed["train"] == 1
    assert first.computed["compress"] == first.computed["compile"] == 2
    assert first.computed["measure"] == 2

    recorded = {r.compression.split("(")[0]: r for r in rows(tmp_path)}
    dense, pruned = recorded["none"], recorded["weight_pruning"]
    for row in (dense, pruned):
        assert row.status == "ok" and row.verified == 1
        assert row.top1_agreement == 1.0 and row.max_abs_diff < 1e-3
        assert row.measure_repeat == 5
        # every sample asked for; on a machine busy throughout, the usable ones there are,
        # and the row says it is noisy (a CI host shared with other guests can be)
        assert len(row.latency_samples_ms) >= 5 or (row.noisy and row.latency_samples_ms)
        assert 0 < row.latency_min_ms <= row.latency_median_ms <= row.latency_max_ms
        assert 0.0 <= row.accuracy <= 1.0
        assert row.macs > 0 and row.params > 0 and row.size_bytes > 0
        assert row.environment["versions"]["apache-tvm"] == "0.27.0.post1"
        assert row.config["budgets"]["measure_repeat"] == 5
    assert dense.sparsity == pytest.approx(0.0)
    assert pruned.sparsity == pytest.approx(0.9, abs=1e-3)
    assert pruned.nonzero_params < dense.nonzero_params
    assert [lvl["level"] for lvl in pruned.compression_info["levels"]] == [0.9]
    assert pruned.compression_ratio == pytest.approx(10.0)  # the pruning's own value
    assert dense.compression_ratio == 1.0
    assert dense.precision == pruned.precision == "float32"
    assert dense.accuracy_source == pruned.accuracy_source == "pytorch"
    assert len(dense.train_history) == 1 and "val_acc" in dense.train_history[0]
    # timed together in one worker: the same rounds, each with its placement, and a CI
    with ResultStore(tmp_path / "results.db") as store:
        (dense_run,) = store.timing_runs(dense.point_key, dense.timing_key)
        (pruned_run,) = store.timing_runs(pruned.point_key, pruned.timing_key)
    assert dense_run.run_id == pruned_run.run_id
    assert [r.index for r in dense_run.rounds] == [r.index for r in pruned_run.rounds]
    assert dense_run.interleaved_with == [pruned.compression + " / direct / none"]
    for row in (dense, pruned):
        assert row.latency_ci_low_ms <= row.latency_median_ms <= row.latency_ci_high_ms
        assert row.placement in ("near", "far") and row.timing_runs == 1
        assert row.placement_round_trip_ns > 0  # two threads: the placement was probed
    assert dense_run.cpus == [0, 1] and [1] in dense_run.thread_cpus  # pinned

    second = run(text, tmp_path)
    assert second.ok == 2 and second.recomputed_nothing
    assert second.reused["measure"] == 2 and second.reused["train"] == 1
    assert len(rows(tmp_path)) == 2


@pytest.fixture
def broken_compression():
    @registry.register("compression", "test_broken", description="always fails")
    def broken(params, model, ctx):
        raise RuntimeError("deliberately broken compression")

    yield "test_broken"
    registry.unregister("compression", "test_broken")


def test_failing_point_is_recorded_and_the_sweep_goes_on(
        tmp_path: Path, shared_cache: Path, broken_compression: str) -> None:
    text = tiny_sweep(compression=[broken_compression, "none"])
    report = run(text, tmp_path, shared_cache)
    assert (report.failed, report.ok) == (1, 1)
    failed = next(r for r in rows(tmp_path) if r.status == "failed")
    assert failed.error_stage == "compress"
    assert "deliberately broken compression" in failed.error
    assert "Traceback" in failed.traceback

    again = run(text, tmp_path, shared_cache)  # the failure is not retried silently
    assert again.skipped_failed == 1 and again.ok == 1 and again.recomputed_nothing

    retry = run(text, tmp_path, shared_cache, retry_failed=True)  # only the failure reruns
    assert retry.failed == 1 and retry.ok == 0 and len(retry.rows) == 1


def test_fail_fast_stops_at_first_failure(
        tmp_path: Path, shared_cache: Path, broken_compression: str) -> None:
    report = run(tiny_sweep(compression=[broken_compression, "none"]), tmp_path, shared_cache,
                 fail_fast=True)
    assert report.failed == 1 and report.ok == 0 and len(report.rows) == 1


@pytest.fixture
def interrupting_algorithm():
    calls = {"n": 0}

    @registry.register("algorithms", "test_interrupt_once",
                       description="raises KeyboardInterrupt on first use, like a Ctrl-C")
    def interrupt_once(params):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt
        from dlas.algorithms.direct import DirectConv

        return DirectConv()

    yield "test_interrupt_once"
    registry.unregister("algorithms", "test_interrupt_once")


def test_interrupted_sweep_resumes_without_redoing_stages(
        tmp_path: Path, interrupting_algorithm: str) -> None:
    text = tiny_sweep(algorithms=[interrupting_algorithm])
    first = run(text, tmp_path)
    assert first.interrupted and first.ok == 0
    assert first.computed["train"] == 1 and first.computed["compile"] == 0
    assert rows(tmp_path) == []  # nothing half-done was recorded

    second = run(text, tmp_path)
    assert not second.interrupted and second.ok == 1
    assert second.reused["train"] == 1 and second.reused["compress"] == 1
    assert second.reused["import"] == 1
    assert second.computed["train"] == 0 and second.computed["compile"] == 1


@pytest.fixture
def flipped_kernel_algorithm():
    """A plausible bug: true convolution (flipped kernel) instead of cross-correlation."""
    from dlas.algorithms.direct import DirectConv

    class FlippedKernelDirect(DirectConv):
        name = "test_flipped_direct"
        needs_weight_value = True

        def weight_constants(self, spec, weight_value):
            return {"weight": weight_value[:, :, ::-1, ::-1].copy()}

    @registry.register("algorithms", "test_flipped_direct", description="wrong on purpose")
    def flipped(params):
        return FlippedKernelDirect()

    yield "test_flipped_direct"
    registry.unregister("algorithms", "test_flipped_direct")


def test_verification_catches_a_wrong_kernel(
        tmp_path: Path, shared_cache: Path, flipped_kernel_algorithm: str) -> None:
    report = run(tiny_sweep(algorithms=[flipped_kernel_algorithm, "direct"]), tmp_path,
                 shared_cache)
    assert report.verification_failed == 1 and report.ok == 1
    by_alg = {r.algorithm: r for r in rows(tmp_path)}
    wrong = by_alg[flipped_kernel_algorithm]
    assert wrong.status == "verification_failed" and wrong.verified == 0
    assert "differs from PyTorch" in wrong.error
    assert wrong.max_abs_diff > 1e-2
    assert wrong.latency_median_ms is None  # a wrong variant is never reported as a time
    assert by_alg["direct"].verified == 1


def test_missing_dataset_fails_its_points_with_where_it_looked(tmp_path: Path) -> None:
    root = tmp_path / "no-cifar-here"
    text = tiny_sweep().replace("datasets: [digits]", f"""datasets:
  - name: cifar10
    params: {{root: "{root}"}}""")
    report = run(text, tmp_path)
    assert report.failed == 1
    (row,) = rows(tmp_path)
    assert row.error_stage == "data"
    assert "DatasetNotFoundError" in row.error and str(root) in row.error


def test_cifar10_and_mobilenetv2_run_through_tvm(tmp_path: Path, tiny_cifar: Path) -> None:
    """The built-in options not exercised above, compiled by TVM and checked vs PyTorch."""
    text = f"""
name: builtins
datasets:
  - name: cifar10
    params: {{root: "{tiny_cifar}", verify_md5: false}}
models:
  - name: mobilenetv2
    params: {{width_multiplier: 0.25}}
compression:
  - name: weight_pruning
    params: {{sparsity: 0.5}}
budgets: {{epochs: 1, finetune_epochs: 1, batch_size: 8, measure_repeat: 3,
          verify_samples: 4}}
"""
    report = run(text, tmp_path / "ws")
    assert report.ok == 1, report.rows[0].error
    (row,) = rows(tmp_path / "ws")
    assert row.verified == 1 and row.top1_agreement == 1.0
    assert row.sparsity == pytest.approx(0.5, abs=1e-3)
    assert row.conv_fallbacks == []


@pytest.fixture
def pretrained_options():
    """Model options tagged "pretrained" (with and without their weights), a dataset with
    no training split, and compressions that fine-tune or report their context."""
    from tests.plugins.tiny_cnn import TinyCNN

    def model_option(loaded: bool):
        def build(params, num_classes, input_shape):
            model = TinyCNN(num_classes)
            model.dlas_pretrained = loaded
            return model

        return build

    def eval_only(params, seed=0):
        import dataclasses

        from dlas.datasets.digits import load_digits

        return dataclasses.replace(load_digits(seed=seed), train=None)

    def fine_tunes(params, model, ctx):
        from dlas.compression.base import CompressionResult

        return CompressionResult(ctx.fine_tune(model, 1))

    def probe(params, model, ctx):
        from dlas.compression.base import CompressionResult

        return CompressionResult(model, {"model_name": ctx.model_name,
                                         "dense_accuracy": ctx.dense_accuracy})

    options = [
        ("models", "test_pretrained_loaded", model_option(True)),
        ("models", "test_pretrained_missing", model_option(False)),
        ("datasets", "test_eval_only", eval_only),
        ("compression", "test_fine_tunes", fine_tunes),
        ("compression", "test_probe", probe),
    ]
    for layer, name, fn in options:
        tags = {"pretrained"} if layer == "models" else set()
        registry.register(layer, name, tags=tags, description="test-only")(fn)
    yield
    for layer, name, _ in options:
        registry.unregister(layer, name)


PRETRAINED_SWEEP = """
name: pretrained
datasets: [{dataset}]
models: [{model}]
compression: [{compression}]
budgets: {{epochs: {epochs}, finetune_epochs: 1, batch_size: 64, measure_repeat: 3,
          verify_samples: 4}}
"""


def test_pretrained_model_without_weights_runs_but_has_no_accuracy(
        tmp_path: Path, pretrained_options: None) -> None:
    from rich.console import Console

    from dlas.runner.console import results_table

    text = PRETRAINED_SWEEP.format(dataset="test_eval_only", model="test_pretrained_missing",
                                   compression="none, int8, test_fine_tunes", epochs=1)
    report = run(text, tmp_path)
    assert (report.ok, report.failed) == (2, 1)
    recorded = {r.compression: r for r in rows(tmp_path)}
    for name in ("none", "int8"):  # timed and verified, never given a made-up accuracy
        row = recorded[name]
        assert row.status == "ok" and row.verified == 1
        assert row.accuracy is None and row.dense_accuracy is None
        assert row.accuracy_source is None and row.ort_accuracy is None
        assert row.train_history == [] and row.latency_median_ms > 0
    assert recorded["int8"].precision == "int8"
    failed = recorded["test_fine_tunes"]
    assert failed.error_stage == "compress"
    assert "has no training split" in failed.error
    assert "test_pretrained_missing" in failed.error

    console = Console(record=True, width=400)
    console.print(results_table([recorded["none"], recorded["int8"]]))
    assert console.export_text().count("unavailable") == 2


def test_pretrained_model_is_not_trained_and_context_names_the_model(
        tmp_path: Path, pretrained_options: None) -> None:
    def sweep(epochs: int) -> str:
        return PRETRAINED_SWEEP.format(dataset="digits", model="test_pretrained_loaded",
                                       compression="test_probe", epochs=epochs)

    first = run(sweep(1), tmp_path)
    assert first.ok == 1, first.rows[0].error
    (row,) = rows(tmp_path)
    assert row.train_history == []
    assert 0.0 <= row.dense_accuracy <= 1.0 and row.accuracy == row.dense_accuracy
    assert row.accuracy_source == "pytorch"
    assert row.compression_info == {"model_name": "test_pretrained_loaded",
                                       "dense_accuracy": row.dense_accuracy}
    # training budgets do not apply to a pretrained model: nothing is redone
    again = run(sweep(3), tmp_path)
    assert again.ok == 1 and again.recomputed_nothing and again.reused["train"] == 1


def test_pruning_levels_left_without_fine_tuning_are_said_and_recorded(
        tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One fine-tuning epoch over two levels with the second fixed: it gets the epoch, and
    the first level's missing fine-tuning is printed and stored with the row."""
    text = tiny_sweep(compression=["weight_pruning"]).replace(
        "  - weight_pruning",
        "  - name: weight_pruning\n    params: {levels: [0.5, 0.7], level: 0.7}")
    report = run(text, tmp_path, shared_cache)
    assert report.ok == 1, report.rows[0].error
    (row,) = rows(tmp_path)
    info = row.compression_info
    assert [lv["finetune_epochs"] for lv in info["levels"]] == [0, 1]
    assert info["chosen_finetune_epochs"] == 1 and info["unfinetuned_levels"] == [0.5]
    (warning,) = info["warnings"]
    assert "level(s) 0.5 got no fine-tuning" in warning
    assert "level(s) 0.5 got no fine-tuning" in capsys.readouterr().out.replace("\n", " ")


def test_too_many_verification_samples_fail_before_training(tmp_path: Path) -> None:
    text = tiny_sweep().replace("verify_samples: 4", "verify_samples: 100000")
    report = run(text, tmp_path)
    assert report.failed == 1 and report.computed["train"] == 0
    (row,) = rows(tmp_path)
    assert row.error_stage == "data"
    assert "budgets.verify_samples is 100000" in row.error
    assert "set budgets.verify_samples to at most" in row.error


def test_a_sweep_lists_the_points_another_sweep_measured_first(
        tmp_path: Path, shared_cache: Path) -> None:
    """Membership is many-to-many: the second sweep's results and report hold every
    point it lists, also those the first sweep measured (and nothing is timed twice)."""
    from dlas.report.data import load_points

    with_ort = "tuning: [none, onnxruntime]"
    first = tiny_sweep("first").replace("tuning: [none]", with_ort)
    second = tiny_sweep("second", algorithms=["direct", "gemm"]).replace("tuning: [none]",
                                                                         with_ort)
    assert run(first, tmp_path, shared_cache).ok == 2
    report = run(second, tmp_path, shared_cache)
    assert report.ok == 3 and report.computed["baseline"] == 0  # the first sweep's timing
    with ResultStore(tmp_path / "results.db") as store:
        listed = {r.algorithm for r in store.rows(sweep="second")}
        assert listed == {"direct", "gemm", "onnxruntime"}
        assert {r.algorithm for r in store.rows(sweep="first")} == {"direct", "onnxruntime"}
        assert len(store.rows()) == 3 and store.sweeps() == ["first", "second"]
        shared = next(r for r in store.rows() if r.algorithm == "onnxruntime")
        assert shared.sweep == "first"  # the row keeps who wrote it first
    points = load_points(tmp_path / "results.db", ["second"])
    assert {p.algorithm for p in points} == {"direct", "gemm", "onnxruntime"}
    assert {p.sweep for p in points} == {"second"}


def _rewrite(path: Path, data: bytes) -> None:
    """Damage a file as a new inode: this process still maps the library its first run
    loaded, and truncating a mapped file in place ends the process with SIGBUS."""
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _zero_64_bytes(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at:at + 64] = bytes(64)
    _rewrite(path, bytes(data))


def test_damaged_cache_entries_are_reported_and_computed_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A truncated compiled library and a trained model with 64 zeroed bytes: the next run
    says which entry, which file and how, computes both again (never loads them: the new
    pruned point's compress stage reads the retrained model), and its points end ok."""
    from dlas.cli import main
    from dlas.runner.cache import Cache
    from dlas.stages import stage_keys
    from dlas.sweep.grid import expand

    dense = tiny_sweep()
    first = run(dense, tmp_path)
    assert first.ok == 1
    keys = stage_keys(expand(parse_config(dense))[0])
    cache = Cache(tmp_path / "cache")
    library = cache.path("compile", keys.compile) / "model.so"
    whole = library.stat().st_size
    _rewrite(library, library.read_bytes()[: whole // 2])
    trained = cache.path("train", keys.train) / "model.pt"
    _zero_64_bytes(trained, trained.stat().st_size // 2)
    capsys.readouterr()

    config = tmp_path / "both.yaml"
    config.write_text(tiny_sweep(compression=["none", "weight_pruning"]).replace(
        "  - weight_pruning", "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}"))
    ws = ["--workspace", str(tmp_path)]
    assert main(["plan", str(config), *ws]) == 0
    planned = capsys.readouterr().out
    assert "damaged: train, compile (the next run computes it again)" in planned
    assert "all stages cached" not in planned

    second = Runner(Workspace(tmp_path), progress=False).run(parse_config(config.read_text()))
    out = capsys.readouterr().out
    assert (second.ok, second.failed) == (2, 0), second.rows
    assert dict(second.damaged) == {"train": 1, "compile": 1}
    assert second.computed["train"] == 1 and second.computed["compile"] == 2
    assert second.reused["measure"] == 1 and second.computed["measure"] == 1
    assert (f"train     damaged cache entry (key {keys.train[:10]}): model.pt: content differs "
            "from what was written (sha256 mismatch, same size); it is discarded and computed "
            "again") in out
    assert (f"compile   damaged cache entry (key {keys.compile[:10]}): model.so: size "
            f"{whole // 2} bytes, written with {whole}; it is discarded") in out
    assert out.index("train     damaged") < out.index("compress  computing")
    assert "2 damaged cache entries found (said above) and computed again" in out
    for stage in ("train", "compile"):
        check = cache.check(stage, getattr(keys, stage))
        assert check.usable and check.verdict.verified

    third = run(config.read_text(), tmp_path)
    assert third.ok == 2 and third.recomputed_nothing and not third.damaged
