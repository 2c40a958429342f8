"""Transfer-tuning: a tuned conv's schedules replayed on a conv of the same structure at
other shapes, tile decisions adapted, give a correct kernel; other structures and the
task itself are never sources."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relax, s_tir
from tvm.s_tir import meta_schedule as ms
from tvm_ffi import structural_equal

from dlas import registry
from dlas.compiler.build import compile_model, lower_to_tir, make_target
from dlas.compiler.relax_import import import_torch_model
from dlas.measure.vm_timing import load_vm, run_batch
from dlas.sweep.config import Budgets
from dlas.targets.base import TargetSpec
from dlas.targets.host import host_target
from dlas.tuning.base import TuningContext
from dlas.tuning.metaschedule.database import TuningDatabase, workload_key
from dlas.tuning.metaschedule.options import MetaScheduleParams, metaschedule
from dlas.tuning.metaschedule.tasks import Task, extract
from dlas.tuning.metaschedule.transfer import (
    TransferCandidate,
    adapt_perfect_tile,
    replay,
    structure_key,
    transfer_candidates,
)

#: (in channels, out channels, resolution): the tuned conv and the one it transfers to.
SRC = (8, 16, 12)
DST = (16, 32, 8)
#: Loop extents of SRC's conv -> DST's (n 1, oc 16->32, oh/ow 12->8, ic 8->16, kh/kw 3).
#: (72 -> 144: the reduction loops fused, as the rfactor design does)
EXTENT_MAP = {1: 1, 3: 3, 16: 32, 12: 8, 8: 16, 72: 144}


@functools.cache
def _target() -> tvm.target.Target:
    from dlas._compat.tensor_intrin import register_for

    target = make_target(host_target(2))
    register_for(target)
    return target


def _algorithm(name: str):
    registry.load_plugins()
    option = registry.get("algorithms", name)
    return option.fn(option.parse_params({}))


def _model(cin: int, cout: int, relu: bool = True, stride: int = 1) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Conv2d(cin, cout, 3, stride=stride, padding=1)]
    return nn.Sequential(*layers, *([nn.ReLU()] if relu else [])).eval()


@functools.cache
def _task(cin: int, cout: int, hw: int, algorithm: str = "direct", relu: bool = True,
          stride: int = 1) -> Task:
    """The conv task of a one-conv model, as the compile hook sees it."""
    imp = import_torch_model(_model(cin, cout, relu, stride), (1, cin, hw, hw))
    mod, _ = lower_to_tir(imp.mod, imp.params, _algorithm(algorithm), _target())
    (task,) = [t for t in extract(mod, _target()) if t.algorithms]
    return task


def _postprocs(task: Task) -> list:
    """The default space's postprocessors, initialised for the task as tuning does."""
    ctx = ms.TuneContext(mod=task.mod, target=_target(), space_generator="post-order-apply",
                         rand_state=1, num_threads=1)
    return list(ctx.space_generator.postprocs)


def _commit(db: TuningDatabase, task: Task, trace: s_tir.Trace, seconds: float) -> None:
    workload = db.database.commit_workload(task.mod)
    db.database.commit_tuning_record(ms.database.TuningRecord(
        trace, workload, run_secs=[seconds], target=_target(),
        args_info=ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])))


def _design_trace(task: Task) -> s_tir.Trace:
    """A sampled point of the default space's multi-level-tiling design (what a search
    would measure first), before postprocessing."""
    ctx = ms.TuneContext(mod=task.mod, target=_target(), space_generator="post-order-apply",
                         rand_state=7, num_threads=1)
    spaces = ctx.generate_design_space()
    return next(s.trace for s in spaces if "sample_perfect_tile" in str(s.trace))


def _tile_decisions(trace: s_tir.Trace) -> list[tuple[object, list[int]]]:
    return [(inst, [int(x) for x in trace.decisions[inst]]) for inst in trace.insts
            if inst.kind.name == "SamplePerfectTile" and inst in trace.decisions]


def _run_prim(mod: tvm.IRModule, args: list[np.ndarray]) -> np.ndarray:
    lib = tvm.compile(mod, target=_target())
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def _random_args(task: Task) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = [[int(d) for d in p.ty.shape] for p in task.mod["main"].params]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _check_kernel(candidate: TransferCandidate, task: Task) -> None:
    """Computes what the unscheduled kernel does; replays from its trace alone, as
    `MetaScheduleApplyDatabase` does (postprocessing included)."""
    assert not structural_equal(candidate.schedule.mod, task.mod)
    want = _run_prim(task.mod, _random_args(task))
    got = _run_prim(candidate.schedule.mod, _random_args(task))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    again = s_tir.Schedule(task.mod)
    candidate.schedule.trace.apply_to_schedule(again, remove_postproc=False)
    assert structural_equal(again.mod, candidate.schedule.mod)


def test_structure_key_ignores_shapes_but_not_structure() -> None:
    key = structure_key(_task(*SRC).mod)
    assert structure_key(_task(*DST).mod) == key
    assert structure_key(_task(8, 16, 12, stride=2).mod) == key  # strides do not enter
    assert structure_key(_task(*SRC, relu=False).mod) != key  # another epilogue
    assert structure_key(_task(*SRC, algorithm="gemm").mod) != key  # another algorithm
    assert structure_key(_task(*DST, algorithm="gemm").mod) == \
        structure_key(_task(*SRC, algorithm="gemm").mod)


def test_perfect_tile_adapted_to_a_new_extent() -> None:
    assert adapt_perfect_tile([1, 1, 4, 3], 12) == [1, 1, 4, 3]  # still tiles: kept
    assert adapt_perfect_tile([1, 1, 4, 3], 8) == [2, 1, 4, 1]  # 3 no longer divides
    assert adapt_perfect_tile([2, 8], 12) == [3, 4]  # the part of 8 that divides 12
    assert adapt_perfect_tile([4, 2, 2], 24) == [6, 2, 2]  # grown: the rest outermost
    assert adapt_perfect_tile([1, 7], 5) == [5, 1]
    for factors, extent in (([2, 3, 4], 10), ([16, 1, 1, 2], 14), ([1, 64], 96)):
        assert math.prod(adapt_perfect_tile(factors, extent)) == extent


def _elementwise(n: int) -> tvm.IRModule:
    from tvm import te

    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def test_partitioned_tile_adapted_or_resampled() -> None:
    sch = s_tir.Schedule(_elementwise(16))
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(loop, factors=sch.sample_partitioned_tile(
        loop, n=3, partition_pos=1, innerpart_factor=2, decision=[2, 2, 4]))
    out, adapted, why = replay(sch.trace, _elementwise(12), [])
    assert why == "" and adapted == [([2, 2, 4], [3, 1, 4])]
    (inst,) = [i for i in out.trace.insts if i.kind.name == "SamplePartitionedTile"]
    assert [int(x) for x in out.trace.decisions[inst]] == [3, 1, 4]
    # 7 cannot keep an inner part divisible by 2: re-sampled, which fails, so no candidate
    out, _, why = replay(sch.trace, _elementwise(7), [])
    assert out is None and why.startswith("replay failed")


def test_committed_record_transfers_with_adapted_tiles(tmp_path: Path) -> None:
    src, dst = _task(*SRC), _task(*DST)
    trace = _design_trace(src)
    # force a tile of the output rows (12) whose innermost factor (3) cannot tile 8
    inst = next(i for i, d in _tile_decisions(trace) if len(d) == 4 and math.prod(d) == 12)
    trace = trace.with_decision(inst, [1, 1, 4, 3], remove_postproc=True)
    db = TuningDatabase(tmp_path / "db")
    db.entry(src.mod, src.name)
    _commit(db, src, trace, 1e-4)

    (candidate,) = transfer_candidates(db, dst, _target(), _postprocs(dst))
    assert candidate.source_task == src.name
    assert candidate.source_key == workload_key(src.mod)
    assert candidate.source_us == pytest.approx(100.0)
    old, new = _tile_decisions(trace), _tile_decisions(candidate.schedule.trace)
    assert len(new) == len(old)
    for (_, was), (_, now) in zip(old, new, strict=True):
        assert math.prod(now) == EXTENT_MAP[math.prod(was)]  # each tiles the new extent
    forced = [now for (i, _), (_, now) in zip(old, new, strict=True) if i.same_as(inst)]
    assert forced == [[2, 1, 4, 1]]
    assert "enter_postproc" in str(candidate.schedule.trace)  # postprocessed
    _check_kernel(candidate, dst)
    # deterministic for a given database
    (same,) = transfer_candidates(db, dst, _target(), _postprocs(dst))
    assert str(same.schedule.trace) == str(candidate.schedule.trace)
    # without postprocessors: the replay alone, still a valid schedule of the task
    (bare,) = transfer_candidates(db, dst, _target(), [])
    assert "enter_postproc" in str(bare.schedule.trace)
    assert "parallel" not in str(bare.schedule.trace).split("enter_postproc")[1]


def test_sources_are_other_workloads_of_the_same_structure_nearest_first(
        tmp_path: Path) -> None:
    dst = _task(*DST)
    near, far = _task(*SRC), _task(8, 16, 4)
    db = TuningDatabase(tmp_path / "db")
    # another structure (no ReLU; the gemm algorithm) and the task itself: never sources
    for other in (_task(*SRC, relu=False), _task(*SRC, algorithm="gemm"), dst):
        _commit(db, other, _design_trace(other), 1e-6)
    assert transfer_candidates(db, dst, _target(), []) == []

    _commit(db, far, _design_trace(far), 1e-6)
    _commit(db, near, _design_trace(near), 1e-3)
    _commit(db, near, _design_trace(near), 1e10)  # a failed run is no record to transfer
    # the source's minimal schedule (here: no schedule at all), faster, as the ledger
    # knows it: its hand-written schedule is not transferred, its best searched one is
    _commit(db, near, s_tir.Schedule(near.mod).trace, 1e-7)
    db.entry(near.mod, near.name).minimal_key = workload_key(near.mod)
    got = transfer_candidates(db, dst, _target(), [])
    assert [c.source_key for c in got] == [workload_key(near.mod), workload_key(far.mod)]
    assert got[0].source_us == pytest.approx(1000.0) and got[0].source_task == near.name
    assert got[1].source_task == workload_key(far.mod)  # no ledger entry: its key
    assert [c.source_key for c in transfer_candidates(db, dst, _target(), [], limit=1)] == \
        [workload_key(near.mod)]


def _apply_database(db_dir: Path):
    """A compile hook that only applies the database's best records (no tuning)."""
    def hook(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
        with target, tvm.transform.PassContext(opt_level=3):
            return relax.transform.MetaScheduleApplyDatabase(str(db_dir))(mod)
    return hook


def test_tuned_task_transfers_to_another_shape(tmp_path: Path) -> None:
    """Tune SRC for real (tiny budget, default space), transfer to DST, commit the
    candidate as DST's record and build the whole DST model from the database."""
    spec = TargetSpec(name="host", tvm_target=host_target(2), num_threads=2)
    ctx = TuningContext(target=spec, budgets=Budgets(), work_dir=tmp_path / "tuning",
                        say=lambda line: None)
    hook = metaschedule(MetaScheduleParams(trials=4, trials_per_task=4, trials_per_iter=4,
                                           population=8, early_stopping=None, tasks="convs"),
                        ctx)
    src_imp = import_torch_model(_model(*SRC[:2]), (1, SRC[0], SRC[2], SRC[2]))
    compile_model(src_imp, _algorithm("direct"), spec.tvm_target, tmp_path / "src",
                  schedule_hook=hook)
    tuned = next(t for t in hook.report.tasks if "conv2d" in t.task)
    assert tuned.outcome == "tuned" and tuned.trials > 0, hook.report.summary()

    db_dir = Path(hook.report.database)
    db = TuningDatabase(db_dir)
    src, dst = _task(*SRC), _task(*DST)
    assert db.database.has_workload(src.mod) and not db.database.has_workload(dst.mod)
    candidates = transfer_candidates(db, dst, _target(), _postprocs(dst))
    assert candidates, "no record of the tuned conv transferred"
    (candidate,) = candidates  # one source workload, one candidate
    assert candidate.source_task == tuned.task and candidate.source_us > 0
    # the best searched record (the minimal schedule has no sampled tiles), tiles adapted
    searched = sorted(((float(np.mean([float(t) for t in r.run_secs])), str(r.trace), r)
                       for r in db.database.get_all_tuning_records()
                       if structural_equal(r.workload.mod, src.mod)
                       and "sample_perfect_tile" in str(r.trace)), key=lambda x: x[:2])
    old, new = _tile_decisions(searched[0][2].trace), _tile_decisions(candidate.schedule.trace)
    assert len(new) == len(old) > 0
    for (_, was), (_, now) in zip(old, new, strict=True):
        assert math.prod(now) == EXTENT_MAP[math.prod(was)]
    assert any(was != now for (_, was), (_, now) in zip(old, new, strict=True))
    _check_kernel(candidate, dst)

    _commit(db, dst, candidate.schedule.trace, candidate.source_us * 1e-6)
    dst_model = _model(*DST[:2])
    dst_imp = import_torch_model(dst_model, (1, DST[0], DST[2], DST[2]))
    result = compile_model(dst_imp, _algorithm("direct"), spec.tvm_target, tmp_path / "dst",
                           schedule_hook=_apply_database(db_dir))
    assert dst.name in result.hook_scheduled
    x = np.random.default_rng(1).standard_normal((1, DST[0], DST[2], DST[2]))
    x = x.astype(np.float32)
    got = run_batch(load_vm(result.executable_path), x)
    want = dst_model(torch.from_numpy(x)).detach().numpy().reshape(1, -1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
