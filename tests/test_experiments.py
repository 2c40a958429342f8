"""Paper experiments: the definitions and the paper's values load and agree with each other,
profiles resolve against the registry (clear errors for options not registered yet), and
`dlas reproduce` runs a profile and writes its report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dlas.cli import main
from dlas.report.experiments import (
    ExperimentError,
    drop_options,
    list_experiments,
    load_experiment,
    resolve_sweep,
    unregistered,
)
from dlas.report.paper import experiments_dir, load_paper
from dlas.sweep.grid import expand

EXPERIMENTS = ["cifar10_cpu", "cifar10_gpu", "imagenet_cpu", "imagenet_gpu"]


def test_every_paper_study_has_a_definition_with_quick_and_full() -> None:
    assert list_experiments() == EXPERIMENTS
    for name in EXPERIMENTS:
        exp = load_experiment(name)
        # the CPU studies have a `day` profile between the two (tuned, at most 8 hours)
        day = {"day"} if exp.device == "cpu" else set()
        assert set(exp.profiles) == {"quick", "full"} | day
        assert exp.sweep_names == [f"{name}-full", f"{name}-quick", *(f"{name}-{d}"
                                                                      for d in day)]
        full = exp.profile("full").sweep["budgets"]
        assert full["measure_repeat"] == 150 and full["tuning_trials"] == 20000
        assert full["finetune_epochs"] == (210 if exp.dataset == "cifar10" else 140)
        assert full["epochs"] == (200 if exp.dataset == "cifar10" else 0)  # ImageNet: pretrained


def test_experiments_agree_with_the_paper_values() -> None:
    paper = load_paper()
    platforms = {r.platform for r in paper.speed_rows}
    for name in EXPERIMENTS:
        exp = load_experiment(name)
        assert set(exp.paper_platforms.values()) <= platforms, name
        for profile in exp.profiles.values():
            for dataset in profile.sweep["datasets"]:
                assert paper.role(dataset) == exp.dataset, (name, dataset)
                for model in profile.sweep["models"]:
                    model = model if isinstance(model, str) else model["name"]
                    assert paper.model_name(dataset, model), (name, model)
    # the paper's tables as printed: 4 models x 4 platform/tuning blocks, ImageNet 5 blocks
    tables = [r.table for r in paper.speed_rows]
    assert (tables.count("table3"), tables.count("table4"), tables.count("table6")) == \
        (16, 16, 20)
    row = paper.speed_row("cifar10", "HiKey CPU", False, "vgg16")
    assert row is not None and row.overall == "i8+Direct"
    assert row.fastest_compression == {"gemm": "WP", "direct": "i8", "spatial_pack": "Dense"}
    assert paper.speed_row("imagenet", "i7", True, "densenet161").fastest_algorithm[
        "int8"] is None  # "-": DenseNet161 int8 did not run in TVM
    assert paper.accuracy_row("imagenet", "efficientnet_b0")["int8"]["accuracy"] == 0.4


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ExperimentError, match="unknown experiment 'cifar'.*cifar10_cpu"):
        load_experiment("cifar")
    with pytest.raises(ExperimentError, match="unknown experiment 'paper'"):
        load_experiment("paper")  # the values file is not an experiment
    with pytest.raises(ExperimentError, match="no profile 'laptop'.*full, quick"):
        load_experiment("cifar10_cpu").profile("laptop")


def test_profiles_resolve_with_what_is_registered() -> None:
    """Every profile is valid for the options that exist now: parameters of registered
    options validate, and the grid expands (constraints run)."""
    for name in EXPERIMENTS:
        exp = load_experiment(name)
        for profile in exp.profiles:
            missing = unregistered(exp.profile(profile).sweep)
            try:
                config, skipped = resolve_sweep(exp, profile, skip_unregistered=True)
            except ExperimentError as exc:  # a whole layer not registered yet (imagenet)
                assert "nothing left on layer" in str(exc)
                continue
            assert skipped == missing
            assert config.name == f"{name}-{profile}" and expand(config)


def _write_experiment(folder: Path, sweep: dict, name: str = "toy") -> None:
    folder.mkdir(exist_ok=True)
    shutil.copy(experiments_dir() / "paper.yaml", folder / "paper.yaml")
    (folder / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "title": "a toy study", "dataset": "cifar10", "device": "cpu",
        "paper_platforms": {"host": "i7"}, "profiles": {"quick": {"sweep": sweep}}}))


def test_unregistered_options_fail_clearly_or_are_left_out(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    sweep = {"datasets": ["digits"], "models": ["tiny_cnn"],
             "compression": ["none", "future_pruning"],
             "algorithms": ["direct", "gemm", "warp_conv"],  # gemm: a point is left to run
             "exclude": [{"compression": "future_pruning", "algorithms": "direct"},
                         {"compression": "none", "algorithms": ["direct", "warp_conv"]}]}
    _write_experiment(tmp_path, sweep)
    monkeypatch.setenv("DLAS_EXPERIMENTS_DIR", str(tmp_path))
    exp = load_experiment("toy")
    with pytest.raises(ExperimentError, match="compression: future_pruning; algorithms: "
                                              "warp_conv.*--skip-unregistered"):
        resolve_sweep(exp, "quick")
    written = tmp_path / "ws" / "toy-quick.yaml"
    config, skipped = resolve_sweep(exp, "quick", skip_unregistered=True, write_to=written)
    assert skipped == {"compression": ["future_pruning"], "algorithms": ["warp_conv"]}
    assert [s.name for s in config.compression] == ["none"]
    # the rule about the dropped option went; the other lost only the dropped name
    assert config.exclude == [{"compression": ["none"], "algorithms": ["direct"]}]
    assert "left out (unregistered)" in written.read_text()


def test_drop_options_refuses_to_empty_a_layer() -> None:
    with pytest.raises(ExperimentError, match="nothing left on layer 'datasets'"):
        drop_options({"datasets": ["imagenet"]}, {"datasets": ["imagenet"]})


def test_a_bad_definition_says_what_is_wrong(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _write_experiment(tmp_path, {"datasets": ["digits"], "models": ["tiny_cnn"]})
    path = tmp_path / "toy.yaml"
    raw = yaml.safe_load(path.read_text())
    monkeypatch.setenv("DLAS_EXPERIMENTS_DIR", str(tmp_path))
    for change, message in ((("device", "tpu"), "device must be one of"),
                            (("name", "other"), "must match the file name"),
                            (("colour", "red"), "unknown keys \\['colour'\\]")):
        path.write_text(yaml.safe_dump({**raw, change[0]: change[1]}))
        with pytest.raises(ExperimentError, match=message):
            load_experiment("toy")


@pytest.mark.slow
def test_reproduce_runs_then_reuses_and_writes_the_report(
        tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    sweep = {"datasets": ["digits"], "models": ["tiny_cnn"], "compression": ["none"],
             "algorithms": ["direct", "not_yet_an_algorithm"],
             "budgets": {"epochs": 1, "finetune_epochs": 1, "data_fraction": 0.25,
                         "batch_size": 64, "measure_repeat": 5, "verify_samples": 4}}
    _write_experiment(tmp_path / "exp", sweep)
    monkeypatch.setenv("DLAS_EXPERIMENTS_DIR", str(tmp_path / "exp"))
    ws = ["--workspace", str(tmp_path / "ws"), "--cache-dir", str(shared_cache)]
    assert main(["reproduce", "toy", *ws, "--no-progress"]) == 2
    assert "not_yet_an_algorithm" in capsys.readouterr().out
    argv = ["reproduce", "toy", "--profile", "quick", *ws, "--no-progress",
            "--skip-unregistered"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    report = tmp_path / "ws" / "reports" / "toy-quick"
    assert str(report / "report.html") in out and "left out" in out
    md = (report / "report.md").read_text()
    assert "LEFT OUT" in md and "not_yet_an_algorithm" in md and "STAND-IN DATASET" in md
    assert "| tiny_cnn | " in md and (report / "figures" / "inference-digits-cpu.png").exists()
    assert main(argv) == 0  # again: everything from the cache
    assert "nothing recomputed" in capsys.readouterr().out
    assert "Where the time goes" not in md
    # profiled per layer before the report: it shows where the time goes
    assert main([*argv, "--profile-layers"]) == 0
    assert "per-layer profiles: 1 of 1 measured point(s)" in capsys.readouterr().out
    assert "## Where the time goes" in (report / "report.md").read_text()


def test_experiment_files_are_read_like_sweep_configs(tmp_path: Path) -> None:
    """A key written twice or a file that is not UTF-8 is an error with file:line."""
    (tmp_path / "twice.yaml").write_text("name: twice\nname: again\n")
    with pytest.raises(ExperimentError, match=r"twice.yaml:2: key 'name' is written twice"):
        load_experiment("twice", tmp_path)
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe name: x\n")
    with pytest.raises(ExperimentError, match="not UTF-8"):
        load_experiment("binary", tmp_path)
