"""MetaSchedule tuning (layer 5): dense and CSR convs tuned with tiny budgets give the
right outputs, the database is shared and resumable, early stopping ends a task, and
candidates can be measured on a board through a real loopback RPC tracker."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.sweep.config import Budgets
from dlas.targets.base import RPCTracker, TargetSpec
from dlas.targets.host import host_target
from dlas.tuning.base import TuningContext
from dlas.tuning.metaschedule.database import TuningDatabase, database_dir
from dlas.tuning.metaschedule.measure import RealArguments, TaskProgress
from dlas.tuning.metaschedule.options import MetaScheduleParams, metaschedule
from tests.rpc_fixtures import RPCBoard, rpc_board  # noqa: F401

SHAPE = (1, 8, 12, 12)


def _model(sparsity: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()).eval()
    if sparsity:
        with torch.no_grad():
            weight = model[0].weight
            weight.mul_((torch.rand_like(weight) >= sparsity).float())
    return model


def _algorithm(name: str):
    registry.load_plugins()
    option = registry.get("algorithms", name)
    return option.fn(option.parse_params({}))


def _tune(imp: ImportedModel, algorithm: str, work: Path, out: Path,
          target: TargetSpec | None = None, **params):
    """Compile with a metaschedule hook; return (hook, compile result)."""
    spec = target or TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    lines: list[str] = []
    ctx = TuningContext(target=spec, budgets=Budgets(), work_dir=work, say=lines.append)
    settings = {"trials": 4, "trials_per_task": 4, "trials_per_iter": 4, "population": 16,
                "early_stopping": None, **params}
    hook = metaschedule(MetaScheduleParams(**settings), ctx)
    result = compile_model(imp, _algorithm(algorithm), spec.tvm_target, out, schedule_hook=hook)
    hook.lines = lines
    return hook, result


def _check_outputs(model: nn.Module, executable: Path) -> None:
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    got = run_batch(load_vm(executable), x)
    want = model(torch.from_numpy(x)).detach().numpy().reshape(1, -1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("algorithm", ["gemm"])
def test_dense_conv_tuned_correct_and_reused(algorithm: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A dense point tunes, computes the model's function and is reused; its minimal
    candidates and its session share one runner worker (a process importing TVM), made
    once per point."""
    from dlas.tuning.metaschedule import tune as tune_module

    made: list[object] = []
    real_make_runner = tune_module.make_runner

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        made.append(args)
        return real_make_runner(*args, **kwargs)

    monkeypatch.setattr(tune_module, "make_runner", counting)
    model = _model()
    imp = import_torch_model(model, SHAPE)
    hook, result = _tune(imp, algorithm, tmp_path / "tuning", tmp_path / "a")
    assert len(made) == 1
    summary = hook.report.summary()
    conv = [t for t in summary["per_task"] if "conv2d" in t["task"]]
    assert conv and conv[0]["outcome"] == "tuned" and conv[0]["kind"] == "dense"
    assert 0 < conv[0]["trials"] <= 4 and conv[0]["best_us"] > 0
    assert summary["trials"] > 0 and summary["reused"] == 0
    assert set(result.hook_scheduled) >= {conv[0]["task"]}
    _check_outputs(model, result.executable_path)
    assert any("trials, best" in line for line in hook.lines)  # progress was reported

    # the same workloads again (another sweep, same target): nothing is tuned
    again, result2 = _tune(imp, algorithm, tmp_path / "tuning", tmp_path / "b")
    assert again.report.trials == 0
    assert again.report.count("reused") == len(summary["per_task"])
    assert set(result2.hook_scheduled) == set(result.hook_scheduled)
    _check_outputs(model, result2.executable_path)


def test_csr_conv_tuned_with_sparse_space_and_real_arrays(tmp_path: Path) -> None:
    model = _model(sparsity=0.8)
    imp = import_torch_model(model, SHAPE)
    # only the conv is searched: with every task in the point, the trials follow each
    # task's measured share of the time, and on a busy machine the tiny add+ReLU's
    # parallel minimal schedule once measured 1.7-5 ms (its fork-join waiting for a
    # descheduled thread) and took the whole budget
    hook, result = _tune(imp, "direct_csr", tmp_path / "tuning", tmp_path / "a",
                         tasks="convs")
    sparse = [t for t in hook.report.tasks if t.kind == "sparse"]
    assert len(sparse) == 1, hook.report.summary()
    assert sparse[0].outcome == "tuned" and sparse[0].trials > 0 and sparse[0].best_us > 0
    assert sparse[0].task in result.hook_scheduled
    _check_outputs(model, result.executable_path)
    # the candidates are the sparse space's: the pixel-tile kernel's decisions sampled
    # (tile size, chunks at once, loop order) and built into the kernel
    db = TuningDatabase(Path(hook.report.database))
    records = [r for r in db.database.get_all_tuning_records() if r.run_secs]
    assert any("sample_categorical" in str(r.trace) and "dlas.spmm" in str(r.trace)
               for r in records)


def test_a_points_csr_and_dense_tasks_share_one_session(tmp_path: Path) -> None:
    """Two CSR convs of different shapes and a dense layer are tuned in one MetaSchedule
    session (one builder, one runner, the gradient scheduler), each in its own space
    (the sparse one for CSR kernels), each CSR conv timed with its own real arrays
    (picked by argument signature: random index arrays would read out of bounds), and
    the point's budget (5, in batches of 2) is shared between them and not exceeded."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 8, 3, padding=1), nn.ReLU(),
                          nn.Flatten(), nn.Linear(8 * 12 * 12, 10)).eval()
    with torch.no_grad():
        for layer in (model[0], model[2]):
            layer.weight.mul_((torch.rand_like(layer.weight) >= 0.8).float())
    imp = import_torch_model(model, SHAPE)
    # allocation "flops": the scheduler's own sharing (a budget of 5 shared by time would
    # go to one task: fewer than MIN_TASK_TRIALS on a task are not worth its search)
    hook, result = _tune(imp, "direct_csr", tmp_path / "tuning", tmp_path / "a", trials=5,
                         trials_per_task=4, trials_per_iter=2, allocation="flops")
    tuned = [t for t in hook.report.tasks if t.outcome == "tuned"]
    assert {t.kind for t in tuned} == {"sparse", "dense"}, hook.report.summary()
    assert len([t for t in tuned if t.kind == "sparse"]) == 2, hook.report.summary()
    assert all(t.trials >= 1 and t.best_us > 0 for t in tuned)
    # the budget holds exactly: MetaSchedule starts a batch of 2 with 1 trial left
    assert hook.report.trials == 5, hook.report.summary()
    assert sum("in one session" in line for line in hook.lines) == 1, hook.lines
    assert any("ranked by chance" in line for line in hook.lines), hook.lines
    _check_outputs(model, result.executable_path)


def test_tasks_the_schedulers_first_round_cannot_reach_are_booked_without_a_space(
        tmp_path: Path) -> None:
    """With a budget of one batch, the gradient scheduler's first round (one batch per
    task, largest first) reaches only the largest task: only it gets a search space and
    its minimal schedule measured; the others are booked as the scheduler leaves them
    (no trials), and the same point again reuses every task."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 4, 1), nn.ReLU()).eval()
    imp = import_torch_model(model, SHAPE)
    settings = {"trials": 2, "trials_per_task": 2, "trials_per_iter": 2, "tasks": "convs",
                "allocation": "flops"}
    hook, result = _tune(imp, "direct", tmp_path / "tuning", tmp_path / "a", **settings)
    convs = [t for t in hook.report.tasks if t.note != "not a conv (tasks: convs)"]
    assert len(convs) == 3, hook.report.summary()
    tuned = [t for t in convs if t.outcome == "tuned"]
    left = [t for t in convs if t.outcome == "untuned"]
    assert len(tuned) == 1 and tuned[0].minimal_us is not None, hook.report.summary()
    assert "conv2d1" in tuned[0].task  # the 16 -> 16 conv is the largest
    assert len(left) == 2 and all(t.ended_by == "scheduler" and t.minimal_us is None
                                  for t in left), hook.report.summary()
    assert any("minimal schedules of 1 task(s)" in line for line in hook.lines), hook.lines
    assert any("tuning 1 task(s) in one session, 2 trials" in line for line in hook.lines)
    _check_outputs(model, result.executable_path)

    again, _ = _tune(imp, "direct", tmp_path / "tuning", tmp_path / "b", **settings)
    assert again.report.trials == 0
    assert again.report.count("reused") == 3, again.report.summary()


def _csr_task(tmp_path: Path):  # noqa: ANN202 - a Task (imported where TVM is loaded)
    """The one conv task of the tiny model pruned to 80%, compiled with `direct_csr`."""
    from dlas.tuning.metaschedule.tasks import Task, extract

    captured: list[Task] = []

    def capture(mod, target):  # noqa: ANN001, ANN202 - the compile hook's signature
        captured.extend(t for t in extract(mod, target) if t.algorithms)
        return mod

    compile_model(import_torch_model(_model(sparsity=0.8), SHAPE), _algorithm("direct_csr"),
                  host_target(2), tmp_path / "a", schedule_hook=capture)
    (csr,) = captured
    return csr


def test_csr_tasks_with_equal_signatures_but_other_arrays_get_separate_sessions(
        tmp_path: Path) -> None:
    """The runner's allocator knows a candidate only by its argument signature, so two
    CSR tasks alike in signature but with other arrays are tuned in two sessions."""
    from dataclasses import replace

    from dlas.tuning.metaschedule.plan import TuningJob, group_sessions
    from dlas.tuning.metaschedule.tasks import Task

    csr = _csr_task(tmp_path)
    assert csr.index_constants()
    other = replace(csr, name="other", constants={
        i: (v[::-1].copy() if v.dtype.kind == "f" else v) for i, v in csr.constants.items()})
    dense = replace(csr, name="dense", constants={})

    def jobs(*tasks: Task) -> list[TuningJob]:
        return [TuningJob(1, t, "sparse", 4, None, "") for t in tasks]

    assert [len(s) for s in group_sessions(jobs(csr, other, dense))] == [2, 1]
    assert [len(s) for s in group_sessions(jobs(csr, replace(csr, name="same"), dense))] == [3]


def test_candidates_of_every_task_share_one_runner_worker(tmp_path: Path) -> None:
    """Minimal and transferred candidates run on one runner worker (each `LocalRunner`
    starts a process that imports TVM: 4-5 s, once per CSR or int8 task before), a task
    with real arrays through a view that lends it its arguments (`ArgumentsRunner`): the
    CSR kernel's minimal candidate, which random indices would send outside its input,
    is measured through it."""
    from dataclasses import replace

    from dlas.compiler.build import make_target
    from dlas.tuning.metaschedule.measure import ArgumentsRunner

    csr = _csr_task(tmp_path)
    spec = TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    ctx = TuningContext(target=spec, budgets=Budgets(), work_dir=tmp_path / "work",
                        say=lambda _line: None)
    hook = metaschedule(MetaScheduleParams(trials=4, early_stopping=None), ctx)
    view = hook._candidate_runner(csr)
    shared = hook._candidate_runner(replace(csr, name="dense", constants={}))
    assert isinstance(view, ArgumentsRunner) and view.shared is shared
    assert hook._candidate_runner(replace(csr, name="other")).shared is shared
    db = TuningDatabase(tmp_path / "db")
    measured = hook._minimals(db, [csr], make_target(spec.tvm_target))
    us, why = measured[csr.name]
    assert us is not None and us > 0, why


def test_real_arguments_copy_the_csr_arrays_in() -> None:
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo

    indptr = np.array([0, 2, 2, 5], dtype=np.int32)
    info = [TensorInfo("float32", [4]).as_json(), TensorInfo("int32", [4]).as_json()]
    (args,) = RealArguments({1: indptr})(tvm.cpu(), info, 1)
    np.testing.assert_array_equal(args[1].numpy(), indptr)
    assert args[0].shape == (4,)


def test_early_stopping_counts_trials_without_improvement() -> None:
    p = TaskProgress()
    assert not p.record([3.0, 2.0], patience=2)
    assert p.best_us == 2.0e6 and p.since_best == 0
    assert not p.record([2.5], patience=2)
    assert p.record([None, 2.1], patience=2)  # a failed build counts as no improvement
    assert p.trials == 5 and p.errors == 1 and p.since_best == 3


def _candidates(hook) -> list[str]:  # noqa: ANN001
    """Every measured candidate's trace in the hook's database, in the order stored."""
    db_dir = Path(hook.report.database)
    lines = (db_dir / "database_tuning_record.json").read_text().splitlines()
    return [json.dumps(json.loads(line)[1][0], sort_keys=True) for line in lines]


def test_one_seed_searches_the_same_candidates_in_every_fresh_database(tmp_path: Path) -> None:
    """Two fresh databases, one seed: the search measures the same candidates. With the
    strategy on two threads (`SEARCH_THREADS`), TVM's parallel sampling drew other ones in
    every run, and a quickstart's tuned row (and its observation's verdict) moved with it."""
    from dlas.tuning.metaschedule.cost_model import ChanceRanking
    from dlas.tuning.metaschedule.tune import SEARCH_THREADS, search_threads

    assert SEARCH_THREADS == 1
    # a session that ranks by chance (this one: 8 trials) searches on one thread; one whose
    # cost model predicts follows its measurements and keeps every worker
    assert search_threads(ChanceRanking(0), 16) == 1 and search_threads("xgb", 16) == 16
    model = _model()
    imp = import_torch_model(model, SHAPE)
    params = {"trials": 8, "trials_per_task": 8, "trials_per_iter": 8, "population": 32}
    first, _ = _tune(imp, "gemm", tmp_path / "one", tmp_path / "a", **params)
    second, _ = _tune(imp, "gemm", tmp_path / "two", tmp_path / "b", **params)
    ours, theirs = _candidates(first), _candidates(second)
    assert len(ours) > 4
    assert sorted(ours) == sorted(theirs)


def test_a_gpu_session_searches_on_every_worker() -> None:
    """On a GPU ~95% of random schedules fail its limits, so drawing a batch is mostly
    rejecting samples (27-30 s on one thread, 11 s on two, for a batch of 32 of ResNet18's
    largest GEMM task): a GPU session's search keeps every builder worker, whatever ranks
    it; a CPU one ranked by chance searches on one thread (`SEARCH_THREADS`)."""
    import tvm

    from dlas.tuning.metaschedule.cost_model import ChanceRanking
    from dlas.tuning.metaschedule.tune import search_threads

    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
    assert search_threads(ChanceRanking(0), 16, cuda) == 16
    assert search_threads("xgb", 16, cuda) == 16
    assert search_threads(ChanceRanking(0), 16, tvm.target.Target(host_target())) == 1


def test_early_stopping_ends_a_real_task(tmp_path: Path) -> None:
    model = _model()
    imp = import_torch_model(model, SHAPE)
    hook, result = _tune(imp, "direct", tmp_path / "tuning", tmp_path / "a", trials=16,
                         trials_per_task=16, trials_per_iter=2, early_stopping=1)
    conv = next(t for t in hook.report.tasks if "conv2d" in t.task)
    assert conv.ended_by == "early_stop" and conv.trials < 16
    _check_outputs(model, result.executable_path)


def test_interrupted_task_resumes_with_the_trials_it_lacks(tmp_path: Path) -> None:
    model = _model()
    imp = import_torch_model(model, SHAPE)
    hook, _ = _tune(imp, "direct", tmp_path / "tuning", tmp_path / "a")
    db_dir = Path(hook.report.database)
    ledger = json.loads((db_dir / "dlas_ledger.json").read_text())
    for entry in ledger.values():  # as if the run had been killed before finishing
        entry["complete"] = False
    (db_dir / "dlas_ledger.json").write_text(json.dumps(ledger))
    resumed, result = _tune(imp, "direct", tmp_path / "tuning", tmp_path / "b", trials=8,
                            trials_per_task=8)
    conv = next(t for t in resumed.report.tasks if "conv2d" in t.task)
    first = next(t for t in hook.report.tasks if "conv2d" in t.task)
    assert conv.outcome == "tuned" and conv.trials <= 8 - first.trials
    _check_outputs(model, result.executable_path)


def test_database_is_per_target(tmp_path: Path) -> None:
    here = TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    board = TargetSpec(name="remote", tvm_target=host_target(2),
                       rpc=RPCTracker("127.0.0.1", 9190, "board-a"))
    other = TargetSpec(name="remote", tvm_target=host_target(2),
                       rpc=RPCTracker("127.0.0.1", 9190, "board-b"))
    dirs = {database_dir(tmp_path, t) for t in (here, board, other)}
    assert len(dirs) == 3
    assert database_dir(tmp_path, here) == database_dir(tmp_path, here)


def test_tuning_through_a_loopback_rpc_board(rpc_board: RPCBoard,  # noqa: F811
                                             tmp_path: Path) -> None:
    host, port, key = rpc_board
    model = _model(sparsity=0.8)
    imp = import_torch_model(model, SHAPE)
    spec = TargetSpec(name="remote", tvm_target=host_target(1), num_threads=1,
                      rpc=RPCTracker(host, port, key, session_timeout_s=120))
    hook, result = _tune(imp, "direct_csr", tmp_path / "tuning", tmp_path / "a", target=spec)
    sparse = next(t for t in hook.report.tasks if t.kind == "sparse")
    assert sparse.outcome == "tuned" and sparse.best_us > 0, hook.report.summary()
    assert Path(hook.report.database).name.startswith("remote-")
    _check_outputs(model, result.executable_path)


def test_unreachable_tracker_fails_before_tuning(tmp_path: Path) -> None:
    from dlas.measure.session import TrackerUnreachable

    imp = import_torch_model(_model(), SHAPE)
    # a port bound but not listening refuses connections, and nothing else (a tracker
    # another test starts) can take it meanwhile, as it could a port merely found free
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = int(held.getsockname()[1])
        spec = TargetSpec(name="remote", tvm_target=host_target(1), num_threads=1,
                          rpc=RPCTracker("127.0.0.1", port, "nobody", request_timeout_s=5))
        with pytest.raises(TrackerUnreachable, match=f"127.0.0.1:{port}"):
            _tune(imp, "direct", tmp_path / "tuning", tmp_path / "a", target=spec)


def cache_hostile_space():
    """A search space whose every sample is a bad schedule, as MetaSchedule's first random
    samples can be: the conv's loops reversed (reduction outermost, batch innermost), so
    nothing vectorizes and the output is written across its strides, on one thread. Its
    one sampled tile size gives the evolutionary search something to mutate."""
    from tvm.s_tir import meta_schedule as ms

    from dlas.tir.schedule_helpers import leaf_blocks

    def apply(sch) -> None:  # noqa: ANN001 - a traced s_tir.Schedule
        for block in leaf_blocks(sch):
            loops = sch.get_loops(block)
            if len(loops) >= 7:  # the conv: n, oc, oh, ow, ic, kh, kw
                sch.split(loops[1], factors=sch.sample_perfect_tile(loops[1], n=2))
                sch.reorder(*reversed(sch.get_loops(block)))

    return ms.space_generator.ScheduleFn(
        apply, sch_rules=[], postprocs=[], mutator_probs={ms.mutator.MutateTileSize(): 1.0})


def test_minimal_schedule_is_kept_when_search_loses(tmp_path: Path) -> None:
    """A search whose samples are bad schedules loses to the algorithm's minimal schedule,
    which was measured as a candidate first: the point keeps the minimal schedule and
    says so."""
    torch.manual_seed(0)
    # the output (1.6 MB) outgrows L2 on every CPU seen, so writing it across its strides
    # once per reduction step costs ~100x the minimal schedule: no noise can reverse that
    model = nn.Sequential(nn.Conv2d(16, 128, 3, padding=1), nn.ReLU()).eval()
    shape = (1, 16, 56, 56)
    imp = import_torch_model(model, shape)
    spec = TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    ctx = TuningContext(target=spec, budgets=Budgets(), work_dir=tmp_path / "tuning",
                        say=lambda line: None)
    hook = metaschedule(MetaScheduleParams(trials=2, trials_per_task=2, trials_per_iter=2,
                                           population=8, early_stopping=None, tasks="convs"),
                        ctx)
    hook.space_for = lambda task: cache_hostile_space()
    result = compile_model(imp, _algorithm("direct"), spec.tvm_target, tmp_path / "a",
                           schedule_hook=hook)
    conv = next(t for t in hook.report.tasks if "conv2d" in t.task)
    assert conv.outcome == "tuned" and conv.trials >= 1, conv
    # the search may measure the minimal trace again (it seeds its population with the
    # database's records); whichever reading is faster, the schedule kept is the minimal one
    assert conv.source == "minimal" and conv.best_us <= conv.minimal_us
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = model(torch.from_numpy(x)).detach().numpy().reshape(1, -1)
    got = run_batch(load_vm(result.executable_path), x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # the minimal record is a candidate, not a trial: the trial count is the search's own
    db = TuningDatabase(Path(hook.report.database))
    task_mod = next(iter(db.database.get_all_tuning_records())).workload.mod
    assert db.measured_trials(task_mod) == conv.trials
    # a faster reading of the same minimal trace (as a search re-measuring it may draw) is
    # still the minimal schedule: attribution is by what is applied, not by which time won
    from tvm.s_tir import meta_schedule as ms

    first = min(db.database.get_all_tuning_records(),
                key=lambda r: float(np.mean([float(t) for t in r.run_secs])))
    db.database.commit_tuning_record(ms.database.TuningRecord(
        first.trace, first.workload, run_secs=[conv.minimal_us * 1e-6 / 2],
        target=first.target, args_info=first.args_info))
    # a second point reuses the task and measures nothing again, minimal included
    again = metaschedule(MetaScheduleParams(trials=2, trials_per_task=2, trials_per_iter=2,
                                            population=8, early_stopping=None, tasks="convs"),
                         ctx)
    compile_model(imp, _algorithm("direct"), spec.tvm_target, tmp_path / "b",
                  schedule_hook=again)
    reused = next(t for t in again.report.tasks if "conv2d" in t.task)
    assert reused.outcome == "reused" and reused.source == "minimal"
    assert reused.minimal_us == conv.minimal_us
    assert reused.best_us == pytest.approx(conv.minimal_us / 2)


def test_transfer_tuning_replays_a_tuned_task_on_another_shape(tmp_path: Path) -> None:
    """A conv tuned on one shape lends its best schedule to the same kind of conv at
    another shape: with `transfer: only` the second point spends no search trials, the
    transferred schedule is measured and committed as a record of the new workload, the
    report says where it came from, and the model still computes its function."""
    first, _ = _tune(import_torch_model(_model(), SHAPE), "direct", tmp_path / "tuning",
                     tmp_path / "a", tasks="convs", transfer=False)
    source = next(t for t in first.report.tasks if "conv2d" in t.task)
    assert source.outcome == "tuned" and source.transfer_candidates == 0
    torch.manual_seed(1)
    other = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()).eval()
    other_shape = (1, 16, 8, 8)
    hook, result = _tune(import_torch_model(other, other_shape), "direct", tmp_path / "tuning",
                         tmp_path / "b", tasks="convs", transfer="only")
    conv = next(t for t in hook.report.tasks if "conv2d" in t.task)
    assert conv.outcome == "transferred" and conv.trials == 0, conv
    assert conv.transfer_candidates >= 1 and hook.report.trials == 0
    assert conv.source in ("minimal", f"transferred from {source.task}"), conv
    db = TuningDatabase(Path(hook.report.database))
    # both tasks are named alike (each model's first fused conv): the new one is the one
    # whose transfer ran
    (entry,) = [e for e in db.ledger.values() if e.transfer_done]
    assert set(entry.transferred.values()) == {source.task}
    assert not entry.complete  # a later point that searches still tunes it
    x = np.random.default_rng(1).standard_normal(other_shape).astype(np.float32)
    want = other(torch.from_numpy(x)).detach().numpy().reshape(1, -1)
    got = run_batch(load_vm(result.executable_path), x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # a searching point on that workload: the transfer is not measured again, search runs
    again, _ = _tune(import_torch_model(other, other_shape), "direct", tmp_path / "tuning",
                     tmp_path / "c", tasks="convs")
    searched = next(t for t in again.report.tasks if "conv2d" in t.task)
    assert searched.outcome == "tuned" and searched.trials > 0
    assert searched.transfer_candidates == 0


def test_pooled_builder_keeps_its_workers_across_batches() -> None:
    """One worker pool serves several batches (LocalBuilder starts one per batch, about
    5 s each here) and is restarted after `restart_every` batches (TVM's workers leak);
    a candidate that fails to build is reported as LocalBuilder reports it."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from dlas.tuning.metaschedule.build_worker import build_candidate
    from dlas.tuning.metaschedule.pooled_builder import PooledBuilder

    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * 2.0, name="b")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b])})
    target = tvm.target.Target(host_target(2))
    builder = PooledBuilder(max_workers=2, timeout_sec=120, f_build=build_candidate,
                            restart_every=2)
    try:
        first = builder.build([BuilderInput(mod, target), BuilderInput(mod, target)])
        pool = builder._pool
        second = builder.build([BuilderInput(mod, target)])
        assert builder._pool is pool  # the same workers
        bogus = tvm.target.Target({"kind": "llvm", "mtriple": "nonexistent-unknown-none"})
        third = builder.build([BuilderInput(mod, bogus)])
        assert builder._pool is not pool  # restarted after 2 batches
    finally:
        builder.close()
    assert all(r.error_msg is None and Path(r.artifact_path).is_file()
               for r in first + second), [r.error_msg for r in first + second]
    assert third[0].artifact_path is None and "exception" in third[0].error_msg


def _tvm_threads() -> int:
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


@pytest.mark.parametrize("threads", [1, 2])
def test_candidates_are_timed_with_the_points_threads(threads: int, monkeypatch) -> None:
    """The runner's worker has the target's thread count, not the single thread a fresh
    TVM process starts with here (a schedule searched on one thread can lose on two)."""
    from dlas.tuning.metaschedule.measure import Timeouts, make_runner

    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    spec = TargetSpec(name="host", tvm_target=host_target(threads), num_threads=threads)
    runner = make_runner(spec, Timeouts(60, 60), None, 1, 1)
    assert runner.pool.submit(_tvm_threads).result() == threads
