"""The Ray executor on a real multi-node Ray cluster on loopback (`ray.cluster_utils`, with
token authentication as dlas's own clusters): the local executor's outcome, and nothing
lost when a node dies mid-sweep."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dlas.results.store import ResultStore
from dlas.runner import ray_auth
from dlas.runner.runner import Runner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import parse_config
from tests.conftest import tiny_sweep

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def sweep_text() -> str:
    text = tiny_sweep(compression=["none", "weight_pruning"], algorithms=["direct", "gemm"])
    return text.replace("  - weight_pruning",
                        "  - name: weight_pruning\n    params: {levels: [0.9], level: 0.9}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A head that runs nothing and two 2-CPU worker nodes, all on this machine's
    loopback and on a token (`dlas.runner.ray_auth`); workers import the test model from
    this checkout."""
    locks = tmp_path_factory.mktemp("locks")
    env = {"PYTHONPATH": str(ROOT), "DLAS_LOCK_DIR": str(locks)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with ray_auth.secured_ray(tmp_path_factory.mktemp("ray-ws"), loopback=True):
            c = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            workers = [c.add_node(num_cpus=2) for _ in range(2)]
            c.wait_for_nodes()
            ray.init(address=c.address, runtime_env={"env_vars": env},
                     include_dashboard=False, logging_level="WARNING", log_to_driver=False)
            try:
                yield c, workers
            finally:
                ray.shutdown()
                c.shutdown()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ray_run(root: Path):
    import tests.plugins.tiny_cnn  # noqa: F401 - the driver pickles points naming it
    from dlas.runner.ray_executor import RayRunner

    return RayRunner(Workspace(root), progress=False).run(parse_config(sweep_text()))


def rows(root: Path) -> dict[str, dict]:
    with ResultStore(root / "results.db") as store:
        return {r.point_key: r for r in store.rows()}


def entries(root: Path) -> set[tuple[str, str]]:
    return {(p.parent.parent.name, p.parent.name) for p in (root / "cache").glob("*/*/meta.json")}


def test_a_ray_sweep_gives_the_local_outcome(cluster, tmp_path: Path) -> None:
    report = ray_run(tmp_path / "ray")
    assert (report.ok, report.failed, report.points) == (4, 0, 4)
    assert dict(report.computed) == {"train": 1, "compress": 2, "import": 2, "compile": 4,
                                     "measure": 4}

    local = Runner(Workspace(tmp_path / "local"), progress=False).run(
        parse_config(sweep_text()))
    assert local.ok == 4
    got, want = rows(tmp_path / "ray"), rows(tmp_path / "local")
    assert got.keys() == want.keys()  # same points
    assert entries(tmp_path / "ray") == entries(tmp_path / "local")  # same stage keys
    for key, row in got.items():
        assert row.status == want[key].status == "ok"
        assert row.verified == want[key].verified == 1
        assert row.backend == "tvm" and row.weight_format == "dense"
    for ref in (tmp_path / "ray" / "cache" / "import").glob("*/reference.npz"):
        other = tmp_path / "local" / "cache" / "import" / ref.parent.name / "reference.npz"
        with np.load(ref) as a, np.load(other) as b:  # same training, same function
            np.testing.assert_allclose(a["outputs"], b["outputs"], rtol=1e-4, atol=1e-5)

    again = ray_run(tmp_path / "ray")
    assert again.ok == 4 and again.recomputed_nothing

    # a library damaged on disk (a new inode: a worker may still map the old one) is
    # reported by the driver and computed again by a task, not used
    library = next((tmp_path / "ray" / "cache" / "compile").glob("*/model.so"))
    damaged = library.with_name("damaged.so")
    damaged.write_bytes(library.read_bytes()[:100])
    os.replace(damaged, library)
    repaired = ray_run(tmp_path / "ray")
    assert repaired.ok == 4 and dict(repaired.damaged) == {"compile": 1}
    assert dict(repaired.computed) == {"compile": 1}
    assert library.stat().st_size > 100


def _node_of(pid: int, nodes: list) -> object | None:
    """The cluster node whose raylet started process `pid`."""
    import psutil

    try:
        chain = {p.pid for p in psutil.Process(pid).parents()}
    except psutil.NoSuchProcess:
        return None
    for node in nodes:
        raylet = node.all_processes.get("raylet")
        if raylet and raylet[0].process.pid in chain:
            return node
    return None


def test_a_node_killed_mid_sweep_loses_nothing(cluster, tmp_path: Path) -> None:
    c, workers = cluster
    root = tmp_path / "ws"
    result: dict = {}
    driver = threading.Thread(target=lambda: result.update(report=ray_run(root)))
    driver.start()
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and time.monotonic() < deadline and driver.is_alive():
        for claim in (root / "cache").glob("*/.claim-*"):  # a stage being computed
            try:
                pid = json.loads(claim.read_text())["pid"]
            except (OSError, ValueError, KeyError):
                continue
            node = _node_of(pid, workers)
            if node is not None:
                c.remove_node(node, allow_graceful=False)
                workers.remove(node)
                killed = claim.parent.name
                break
        time.sleep(0.2)
    driver.join(timeout=900)
    try:
        assert killed, "no stage was seen running on a worker node"
        report = result["report"]
        assert (report.ok, report.failed) == (4, 0), f"killed during {killed}"
        # a killed holder's claim file is not left behind (it may have stored its entry)
        assert not list((root / "cache").glob("*/.claim-*"))

        rerun = Runner(Workspace(root), progress=False).run(parse_config(sweep_text()))
        assert rerun.ok == 4 and rerun.recomputed_nothing
    finally:
        while len(workers) < 2:  # the next tests get two worker nodes again, pass or fail
            workers.append(c.add_node(num_cpus=2))
        c.wait_for_nodes()


def test_candidate_builds_fan_out_over_the_cluster_and_run_here(cluster) -> None:
    """RayBuilder builds on the cluster's nodes; the library runs in the local runner."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from dlas.tuning.metaschedule.build_worker import build_candidate
    from dlas.tuning.metaschedule.ray_builder import RayBuilder, fan_out_possible

    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * 2.0, name="b")
    func = te.create_prim_func([a, b])
    mod = tvm.IRModule({"main": func})
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    bogus = tvm.target.Target({"kind": "llvm", "mtriple": "nonexistent-unknown-none"})
    builder = RayBuilder(f_build=build_candidate, timeout_sec=120)
    try:
        built = builder.build([BuilderInput(mod, target), BuilderInput(mod, target),
                               BuilderInput(mod, bogus)])
        assert all(r.error_msg is None for r in built[:2]), [r.error_msg for r in built]
        assert built[2].artifact_path is None and "exception" in built[2].error_msg
        args = ms.arg_info.ArgInfo.from_prim_func(func)
        (future,) = ms.runner.LocalRunner(timeout_sec=60).run(
            [ms.runner.RunnerInput(built[0].artifact_path, "cpu", args)])
        result = future.result()
        assert result.error_msg is None and len(result.run_secs) > 0
    finally:
        builder.close()

    # the driver builds locally; a task on a node with others beside it fans out
    assert not fan_out_possible()
    assert ray.get(ray.remote(fan_out_possible).options(num_cpus=1).remote())


def test_a_process_that_is_no_ray_task_learns_it_without_importing_ray() -> None:
    """Every tuned point of a local sweep asks whether to fan builds out; the answer must
    not cost Ray's import (1.4 s on a Zen 3) in a process that never imported it."""
    import subprocess
    import sys

    check = ("import sys; from dlas.tuning.metaschedule.ray_builder import fan_out_possible; "
             "assert not fan_out_possible(); assert 'ray' not in sys.modules, 'ray imported'")
    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


RAY_DRIVER = """
import json, signal, sys
# Ctrl-C raises KeyboardInterrupt, as in a terminal (a background job of a
# non-interactive shell, e.g. a CI harness, starts with SIGINT ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {root!r})
import tests.plugins.tiny_cnn  # noqa: F401 - registers the test model
from dlas.runner.ray_executor import RayRunner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import parse_config
report = RayRunner(Workspace(sys.argv[1]), progress=False).run(
    parse_config(open(sys.argv[2]).read()))
print("REPORT " + json.dumps({{"interrupted": report.interrupted, "ok": report.ok,
                              "computed": dict(report.computed)}}))
"""


def test_ctrl_c_stops_a_ray_sweep_and_the_same_run_resumes(tmp_path: Path) -> None:
    """A driver with its own local Ray instance (`dlas run --executor ray`): SIGINT
    cancels the running tasks; what finished is cached and the next run picks it up."""
    import signal
    import subprocess
    import sys

    config = tmp_path / "sweep.yaml"
    config.write_text(sweep_text())
    root = tmp_path / "ws"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLAS_LOCK_DIR": str(tmp_path / "locks")}
    proc = subprocess.Popen([sys.executable, "-c", RAY_DRIVER.format(root=str(ROOT)),
                             str(root), str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if list((root / "cache" / "compress").glob("*/meta.json")):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    line = next((x for x in out.splitlines() if x.startswith("REPORT ")), None)
    assert line is not None, err[-3000:]
    first = json.loads(line[len("REPORT "):])
    assert first["interrupted"] and first["ok"] < 4, (first, out[-3000:], err[-3000:])

    resumed = Runner(Workspace(root), progress=False).run(parse_config(sweep_text()))
    assert resumed.ok == 4
    assert resumed.computed["train"] == 0 and resumed.reused["train"] >= 1
    assert not list((root / "cache").glob("*/.tmp-*"))


def test_reproduce_runs_an_experiment_on_the_cluster(cluster, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`dlas reproduce EXPERIMENT --executor ray`: the Ray executor walks the same point
    plans as the local one, so a local reproduction afterwards recomputes nothing."""
    from dlas.report.reproduce import reproduce
    from dlas.runner.ray_executor import RayRunner
    from tests.test_experiments import _write_experiment

    sweep = {"datasets": ["digits"], "models": ["tiny_cnn"], "compression": ["none"],
             "algorithms": ["direct", "gemm"], "tuning": ["none", "onnxruntime"],
             "budgets": {"epochs": 1, "finetune_epochs": 1, "data_fraction": 0.25,
                         "batch_size": 64, "measure_repeat": 5, "verify_samples": 4,
                         "timing_rounds": 2, "placement_wait_s": 0, "noise_budget_s": 1,
                         "timing_passes": 2}}
    _write_experiment(tmp_path / "exp", sweep)
    monkeypatch.setenv("DLAS_EXPERIMENTS_DIR", str(tmp_path / "exp"))
    ws = Workspace(tmp_path / "ws")
    on_ray = reproduce("toy", "quick", ws, executor=RayRunner(ws, progress=False),
                       progress=False)
    assert (on_ray.run.ok, on_ray.run.failed) == (3, 0)
    # the report is the second timing pass's: it timed every point again on the cluster
    assert on_ray.run.computed["measure"] == 2 and on_ray.run.computed["baseline"] == 1
    assert {r.timing_runs for r in on_ray.run.rows if r.status == "ok"} == {2}
    assert "| tiny_cnn | " in on_ray.report.markdown.read_text()
    local = reproduce("toy", "quick", ws, progress=False)  # both passes are done
    assert local.run.ok == 3 and local.run.recomputed_nothing
