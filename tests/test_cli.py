"""The command line: plan, run, results, and a third-party plugin package."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlas.cli import main
from tests.conftest import tiny_sweep
from tests.test_yaml_limits import bomb

REPO = Path(__file__).resolve().parents[1]
DLAS = [sys.executable, "-m", "dlas.cli"]


def test_plan_run_results(tmp_path: Path, shared_cache: Path,
                          capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep(compression=["none", "weight_pruning"]))
    ws = ["--workspace", str(tmp_path / "ws"), "--cache-dir", str(shared_cache)]

    assert main(["plan", str(config), *ws]) == 0
    out = capsys.readouterr().out
    assert "2 points: 2 runnable" in out

    assert main(["run", str(config), "--no-progress", *ws]) == 0
    out = capsys.readouterr().out
    assert "2 ok, 0 failed" in out and "stages" in out
    ending = out.split("results of this sweep")[1]  # the study, then what it decided
    assert ending.index("observations this sweep decided") < ending.index("see more")

    assert main(["plan", str(config), *ws]) == 0
    assert capsys.readouterr().out.count("all stages cached") == 2

    csv_path = tmp_path / "out.csv"
    assert main(["results", "--csv", str(csv_path), *ws]) == 0
    assert "wrote 2 rows" in capsys.readouterr().out
    assert len(csv_path.read_text().splitlines()) == 3


def test_config_error_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("name: x\ndatasets: [digit]\nmodels: [resnet18]\n")
    assert main(["plan", str(config)]) == 2
    out = capsys.readouterr().out
    assert "bad.yaml:2" in out and "Did you mean 'digits'?" in out


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "TVM_NUM_THREADS": "2", **extra}
    env.pop("DLAS_WORKSPACE", None)
    return env


def test_external_plugin_package_runs_in_a_sweep(tmp_path: Path) -> None:
    """Build and install a separate package; its option appears and runs, dlas/ untouched."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(site), str(REPO / "tests/data/dlas-example-plugin")],
        check=True, capture_output=True, text=True)
    env = _env(PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))

    listing = subprocess.run([*DLAS, "plugins", "--layer", "compression"], env=env,
                             capture_output=True, text=True, check=True).stdout
    assert "magnitude_threshold" in listing and "dlas-example-plugin 0.1.0" in listing

    config = tmp_path / "sweep.yaml"
    config.write_text("""
name: plugin-sweep
datasets: [digits]
models:
  - name: resnet18
    params: {width_multiplier: 0.125}
compression:
  - name: magnitude_threshold
    params: {threshold: 0.3}
budgets: {epochs: 0, measure_repeat: 3, verify_samples: 2, timing_rounds: 2,
          placement_wait_s: 0, noise_budget_s: 1}
""")
    # one timing pass: what is tested is the plugin's option, not the timing (test_passes)
    result = subprocess.run([*DLAS, "run", str(config), "--no-progress", "--passes", "1",
                             "--workspace", str(tmp_path / "ws")], env=env,
                            capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 ok, 0 failed" in result.stdout
    shown = subprocess.run([*DLAS, "results", "--json", "--workspace", str(tmp_path / "ws")],
                           env=env, capture_output=True, text=True, check=True).stdout
    assert '"compression": "magnitude_threshold(threshold=0.3)"' in shown
    assert '"verified": 1' in shown


@pytest.mark.slow
def test_ctrl_c_mid_training_then_rerun_resumes(tmp_path: Path) -> None:
    """A real SIGINT during training; the re-run resumes from the epoch checkpoint."""
    config = tmp_path / "sweep.yaml"
    config.write_text("""
name: interrupt
datasets: [digits]
models:
  - name: resnet18
    params: {width_multiplier: 0.125}
budgets: {epochs: 4, batch_size: 64, measure_repeat: 3, verify_samples: 2,
          timing_rounds: 2, placement_wait_s: 0, noise_budget_s: 1}
""")
    # one timing pass: what is tested is the resumed training, not the timing (test_passes)
    cmd = [*DLAS, "run", str(config), "--no-progress", "--passes", "1", "--workspace",
           str(tmp_path / "ws")]
    env = _env(PYTHONPATH=str(REPO))
    # A shell's background job starts with SIGINT ignored, and Python then never installs
    # its Ctrl-C handler; give the child the default disposition, as a terminal would.
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    ckpts = tmp_path / "ws" / "cache" / "train"
    deadline = time.time() + 300
    while time.time() < deadline and not list(ckpts.glob("*.partial/*.ckpt")):
        time.sleep(0.5)
    assert list(ckpts.glob("*.partial/*.ckpt")), "no epoch checkpoint appeared"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "interrupted" in out

    rerun = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "resuming training from epoch" in rerun.stdout + rerun.stderr
    assert "1 ok, 0 failed" in rerun.stdout


# --- bad input: exit 2, file:line and what to do, never a traceback ------------------------

BASE = "name: x\ndatasets: [digits]\nmodels: [resnet18]\n"


@pytest.mark.parametrize("content, expected", [
    (BASE + "algorithms: []\n", "bad.yaml:4: 'algorithms' lists no options"),
    (BASE + "algorithms: [direct, gemm, direct]\n",
     "bad.yaml:4: algorithms option 'direct' is listed twice"),
    (BASE + "budgets:\n  epochs: 1\n  epochs: 2\n",
     "bad.yaml:6: key 'epochs' is written twice in the same mapping (first at line 5)"),
    (BASE + "targets:\n  - name: host\n    params: {mcpu: znver9}\n",
     "bad.yaml:6: 'targets[0].params.mcpu': mcpu 'znver9' is not a CPU LLVM knows"),
    (BASE + "budgets: {measure_repeat: 0}\n", "bad.yaml:4: 'budgets.measure_repeat'"),
    (BASE + "exclude:\n  - {models: resnet18}\n", "leave out every point"),
    ("", "bad.yaml: the file is empty"),
    ("- digits\n", "bad.yaml: the sweep config is a YAML list, not a mapping"),
    (bomb(), "bad.yaml:8: alias *l3 (a copy of 11,111 nodes) brings the document to more"),
])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_bad_config_exits_2_with_where_and_what(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                command: str, content: str,
                                                expected: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    ws = ["--workspace", str(tmp_path / "ws")]
    assert main([command, str(config), *ws]) == 2
    out = capsys.readouterr().out.replace(str(config), "bad.yaml")
    assert out.startswith("error: ") and expected in out
    assert not (tmp_path / "ws").exists()  # refused before any work


def test_unreadable_config_and_bad_paths_exit_2(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    """`main` returning 2 (not raising) is what keeps a traceback off the user's screen."""
    binary = tmp_path / "sweep.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe\n")
    good = tmp_path / "good.yaml"
    good.write_text(BASE)
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    cases = [
        (["plan", str(binary)], f"{binary}:2: not UTF-8 text"),
        (["plan", str(tmp_path)], "is a directory; give the path of a sweep config file"),
        (["run", str(tmp_path / "nope.yaml")], "sweep config not found"),
        (["plan", str(good), "--workspace", str(not_a_folder)],
         f"--workspace {not_a_folder}: {not_a_folder} is a file, not a folder"),
        (["plan", str(good), "--cache-dir", str(not_a_folder)], "is a file, not a folder"),
        (["results", "--workspace", str(not_a_folder / "sub")], "is a file, not a folder"),
        (["reproduce", "no_such_experiment", "--workspace", str(tmp_path / "ws")],
         "unknown experiment 'no_such_experiment'"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        assert expected in capsys.readouterr().out, argv


def test_not_utf8_config_from_the_shell_is_one_line(tmp_path: Path) -> None:
    """Run as a user would: the process's whole output is the one-line error."""
    binary = tmp_path / "sweep.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe\n")
    result = subprocess.run([*DLAS, "plan", str(binary)], env=_env(PYTHONPATH=str(REPO)),
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stdout.startswith(f"error: {binary}:2: not UTF-8 text")


def test_plugins_shows_required_and_factory_defaults(capsys: pytest.CaptureFixture) -> None:
    from pydantic import BaseModel, Field

    from dlas import registry
    from dlas.cli import _schema_summary

    class Params(BaseModel):
        threshold: float = Field(gt=0)
        levels: list[float] = Field(default_factory=lambda: [0.5, 0.9])
        note: str = "x"

    @registry.register("compression", "test_required_param", params=Params,
                       description="test")
    def _opt(params, model, ctx):  # pragma: no cover - only listed
        raise AssertionError

    try:
        summary = _schema_summary(registry.get("compression", "test_required_param"))
        assert summary == "threshold: float required; levels: list[float] =[0.5, 0.9]; " \
                          "note: str ='x'"
        assert main(["plugins"]) == 0
        out = capsys.readouterr().out
        assert "PydanticUndefined" not in out
        assert "target: BoardTarget ={'name': 'llvm'}" in out  # a model default, as written
    finally:
        registry.unregister("compression", "test_required_param")


def test_bad_ray_options_exit_2_with_what_to_do(tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    import socket

    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep())
    ws = ["--workspace", str(tmp_path / "ws")]
    with socket.socket() as free:  # a port nobody listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert main(["run", str(config), *ws, "--executor", "ray",
                 "--ray-address", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().out
    assert f"--ray-address 127.0.0.1:{port}: no Ray cluster answers there" in err
    assert "ray start --head" in err
    assert main(["run", str(config), *ws, "--ray-address", "127.0.0.1:6379"]) == 2
    assert "only with --executor ray" in capsys.readouterr().out
    assert not (tmp_path / "ws" / "results.db").exists()  # nothing ran


# --- a damaged results database: exit 2, what to do, the file untouched ---------------------

def _results_db(path: Path, rows: int = 60) -> None:
    from dlas.results.store import ResultRow, ResultStore

    with ResultStore(path) as store:
        for i in range(rows):
            store.upsert(ResultRow(point_key=f"p{i}", sweep="tiny", status="ok",
                                   latency_samples_ms=[float(j) for j in range(150)]))


def _random_bytes(path: Path) -> None:
    import random

    path.write_bytes(random.Random(0).randbytes(64 * 1024))


def _truncated(path: Path) -> None:
    _results_db(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _overwritten_page(path: Path) -> None:
    import random

    _results_db(path)
    data = bytearray(path.read_bytes())
    data[4096:8192] = random.Random(1).randbytes(4096)  # the second page: the table's root
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_random_bytes, _truncated, _overwritten_page])
def test_damaged_results_db_exits_2_and_is_left_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture, damage) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = ws / "results.db"
    damage(db)
    before = db.read_bytes()
    config = tmp_path / "sweep.yaml"
    config.write_text(tiny_sweep())
    where = ["--workspace", str(ws)]
    commands = [["run", str(config), "--no-progress", *where], ["results", *where],
                ["report", *where], ["reproduce", "cifar10_cpu", "--no-progress", *where],
                ["plan", str(config), "--estimate", *where]]
    for argv in commands:
        assert main(argv) == 2, argv
        out = capsys.readouterr().out.replace("\n", "")
        assert out.startswith(f"error: {db}: the results database is damaged ("), (argv, out)
        assert f"Move it aside (mv {db} {db}.damaged)" in out, argv
        assert "dlas run CONFIG" in out and "rebuilt" in out, argv
        assert db.read_bytes() == before, argv  # no repair, no table written into it
    assert not list(ws.rglob("meta.json"))  # and nothing ran


def test_results_db_checks_accept_what_dlas_writes(tmp_path: Path) -> None:
    """The other side: a new, an empty and a healthy database open; a foreign SQLite
    database is not written into."""
    import sqlite3

    from dlas.results.health import DamagedDatabaseError, check_database
    from dlas.results.store import ResultStore

    check_database(tmp_path / "absent.db")
    (tmp_path / "empty.db").write_bytes(b"")
    with ResultStore(tmp_path / "empty.db") as store:
        assert store.rows() == []
    _results_db(tmp_path / "ok.db")
    with ResultStore(tmp_path / "ok.db") as store:
        assert len(store.rows()) == 60 and store.sweeps() == ["tiny"]
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE photos (name TEXT)")
    conn.close()
    before = foreign.read_bytes()
    with pytest.raises(DamagedDatabaseError, match="without a 'points' table"):
        ResultStore(foreign)
    assert foreign.read_bytes() == before


# --- SIGTERM (batch schedulers, kill) stops a run like Ctrl-C ------------------------------

#: `dlas run` with the test model registered; the measure stage first starts a child
#: process that would outlive it (as a timing worker or a builder pool might) and writes
#: its pid where the test finds it.
SIGTERM_DRIVER = """
import sys
sys.path.insert(0, {root!r})
import tests.plugins.tiny_cnn  # noqa: F401 - registers the test model
from dlas.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_mid_measurement_then_rerun_resumes(tmp_path: Path) -> None:
    """SIGTERM while the timing worker runs: exit 130 with the interrupted message, the
    worker stopped with the sweep, no timing stored; the same command then resumes."""
    import threading

    import psutil

    config = tmp_path / "sweep.yaml"
    # a timing of several seconds (the tiny model runs in ~0.04 ms), so that the signal
    # lands inside it
    config.write_text(tiny_sweep().replace("measure_repeat: 5", "measure_repeat: 3000\n"
                                           "  measure_number: 20\n  noise_retries: 0"))
    driver = SIGTERM_DRIVER.format(root=str(REPO))
    cmd = [sys.executable, "-c", driver, "run", str(config), "--no-progress",
           "--workspace", str(tmp_path / "ws")]
    env = _env(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
               DLAS_LOCK_DIR=str(tmp_path / "locks"))
    # whatever the harness did to this process's signals, the child starts with defaults
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    lines: list[str] = []
    rounds = threading.Event()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.strip().startswith("round 1:"):
                rounds.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert rounds.wait(300), "".join(lines)
    workers = [c for c in psutil.Process(proc.pid).children(recursive=True)
               if "timing_worker" in " ".join(c.cmdline())]
    assert workers, "".join(lines)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
        reader.join(timeout=30)
        lingered = [w.pid for w in workers if w.is_running() and w.status() != "zombie"]
    finally:
        for w in workers:
            if w.is_running():
                w.kill()
    out = "".join(lines)
    assert proc.returncode == 130, out
    assert "interrupted: completed stages are cached; run the same command again" in out
    assert "(stopped by SIGTERM, as Ctrl-C would)" in out
    assert "Traceback" not in out
    assert not lingered
    assert not list((tmp_path / "ws" / "cache" / "measure").glob("*/meta.json"))

    # the re-run's one timing pass resumes the interrupted one (more: test_passes)
    rerun = subprocess.run([*cmd, "--passes", "1"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "1 ok, 0 failed" in rerun.stdout
    assert "compile   reused from cache" in rerun.stdout
    assert "timing    1 variant(s)" in rerun.stdout


def test_init_writes_the_starter_config_and_refuses_to_overwrite(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`dlas init` copies the quickstart's config; an existing file (without --force) or a
    missing folder is a usage error: exit 2, saying what to do."""
    target = tmp_path / "mine.yaml"
    assert main(["init", str(target)]) == 0
    assert target.read_text() == (Path(__file__).parents[1] / "configs" /
                                  "quickstart.yaml").read_text()
    assert main(["init", str(tmp_path)]) == 0  # a folder: the starter's own name in it
    assert (tmp_path / "quickstart.yaml").exists()
    capsys.readouterr()
    assert main(["init", str(target)]) == 2
    assert "exists; give another path, or --force" in capsys.readouterr().out
    target.write_text("edited")
    assert main(["init", str(target), "--force"]) == 0 and target.read_text() != "edited"
    assert main(["init", str(tmp_path / "nowhere" / "x.yaml")]) == 2
    assert "is not a folder; create it first" in capsys.readouterr().out.replace("\n", " ")
