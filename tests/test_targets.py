"""Layer 6 target options: validation, the JSON targets, cross (aarch64) and CUDA builds."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from pydantic import ValidationError

from dlas import registry
from dlas.compiler.build import compile_model
from dlas.compiler.relax_import import ImportedModel, import_torch_model
from dlas.results.store import ResultStore
from dlas.runner.runner import Runner
from dlas.runner.workspace import Workspace
from dlas.sweep.config import ConfigError, parse_config
from dlas.targets.arch import machine_arch, target_arch
from dlas.targets.base import TargetSpec
from dlas.targets.options import NO_GPU, local_cuda_gpu
from tests.conftest import tiny_sweep

OTHER_ARCH = "aarch64" if machine_arch() != "aarch64" else "x86_64"
NO_GPU_HERE = pytest.mark.skipif(local_cuda_gpu() is not None,
                                 reason="a CUDA GPU is present: points are measured")


def spec(name: str, **params) -> TargetSpec:
    option = registry.get("targets", name)
    return option.fn(option.parse_params(params))


def invalid(name: str, **params) -> str:
    option = registry.get("targets", name)
    with pytest.raises(ValidationError) as info:
        option.parse_params(params)
    return str(info.value)


@pytest.fixture(scope="module", autouse=True)
def plugins() -> None:
    registry.load_plugins()


def test_misspelled_arch_lists_the_valid_ones() -> None:
    message = invalid("llvm", arch="aarch46")
    assert "Did you mean 'aarch64'?" in message and "x86_64, aarch64" in message
    assert spec("llvm", arch="arm64").fingerprint["arch"] == "aarch64"  # an alias


def test_bad_mcpu_and_mattr_are_rejected() -> None:
    assert "Did you mean 'cortex-a7" in invalid("llvm", arch="aarch64", mcpu="cortex-a37")
    assert "start with + or -" in invalid("llvm", mattr=["neon"])
    assert "sm_" in invalid("cuda", arch="80")


def test_host_and_llvm_share_one_mcpu_check(capfd: pytest.CaptureFixture) -> None:
    """LLVM only warns about an unknown -mcpu and builds generic code; both CPU targets
    refuse it when the config is parsed, with the same words, without LLVM's noise."""
    here = machine_arch()
    host_msg, llvm_msg = invalid("host", mcpu="znver9"), invalid("llvm", mcpu="znver9")
    for msg in (host_msg, llvm_msg):
        assert f"mcpu 'znver9' is not a CPU LLVM knows for {here}" in msg
        assert "Leave mcpu out" in msg
    assert "is not valid" not in capfd.readouterr().err  # LLVM's own message stayed quiet
    assert spec("host", mcpu="generic").tvm_target["mcpu"] == "generic"
    assert "is not a CPU LLVM knows" in invalid("cuda", arch="sm_80", host={"mcpu": "nope"})


def test_unknown_mattr_feature_is_rejected_per_arch(capfd: pytest.CaptureFixture) -> None:
    x86 = invalid("llvm", arch="x86_64", mattr=["+avx2", "+neon"])
    assert "mattr ['+neon']: not a feature LLVM knows for x86_64" in x86
    assert "mattr ['+avx2']" in invalid("llvm", arch="aarch64", mattr=["+avx2"])
    assert "not a recognized feature" not in capfd.readouterr().err
    arm = spec("llvm", arch="aarch64", mattr=["+dotprod", "-sve"])
    assert arm.tvm_target["mattr"] == ["+dotprod", "-sve", "+neon"]


def test_unknown_cuda_arch_is_rejected() -> None:
    assert "GPU arch 'sm_1' is not one LLVM's NVPTX backend knows" in invalid("cuda",
                                                                              arch="sm_1")
    assert spec("cuda", arch="sm_90a").tvm_target["arch"] == "sm_90a"


@pytest.mark.parametrize("target, where", [
    ("{name: host, params: {mcpu: znver9}}", "'targets[0].params.mcpu'"),
    ("{name: llvm, params: {mattr: ['+bogus']}}", "'targets[0].params.mattr'"),
    ("{name: remote, params: {key: k, target: {name: llvm, params: {mcpu: nope}}}}",
     "'targets[0].params.target.params.mcpu'"),
])
def test_bad_cpu_parameters_fail_at_config_load(target: str, where: str) -> None:
    text = f"name: x\ndatasets: [digits]\nmodels: [resnet18]\ntargets:\n  - {target}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="s.yaml")
    assert f"s.yaml:5: {where}: " in str(err.value)


def test_llvm_json_targets() -> None:
    arm = spec("llvm", arch="aarch64", mcpu="cortex-a73", mattr=["+fp-armv8"], threads=4)
    assert arm.tvm_target == {"kind": "llvm", "mtriple": "aarch64-linux-gnu",
                              "mcpu": "cortex-a73", "mattr": ["+fp-armv8", "+neon"],
                              "num-cores": 4}
    assert arm.num_threads == 4 and arm.device == "cpu"
    tvm.target.Target(arm.tvm_target)  # TVM accepts the dict as is
    local = spec("llvm")
    assert local.unmeasurable is None and local.tvm_target["kind"] == "llvm"
    assert local.tvm_target["mcpu"] == spec("host").tvm_target["mcpu"]  # detected
    assert target_arch(local.tvm_target) == machine_arch()


def test_other_arch_is_compiled_but_not_measured_here() -> None:
    other = spec("llvm", arch=OTHER_ARCH)
    assert other.unmeasurable and OTHER_ARCH in other.unmeasurable
    assert "remote" in other.unmeasurable  # what to do instead


def test_cuda_json_target() -> None:
    gpu = spec("cuda", arch="sm_72", host={"threads": 2})
    assert gpu.tvm_target["kind"] == "cuda" and gpu.tvm_target["arch"] == "sm_72"
    assert gpu.tvm_target["host"]["kind"] == "llvm" and gpu.tvm_target["host"]["num-cores"] == 2
    assert gpu.device == "cuda" and gpu.num_threads == 2
    target = tvm.target.Target(gpu.tvm_target)
    assert target.kind.name == "cuda" and target.host.kind.name == "llvm"


@NO_GPU_HERE
def test_cuda_without_gpu_is_unmeasurable() -> None:
    gpu = spec("cuda")
    assert gpu.unmeasurable == NO_GPU and gpu.tvm_target["arch"] == "sm_80"


def test_remote_target_wraps_a_board_target() -> None:
    board = spec("remote", key="hikey970", tracker_host="lab", tracker_port=9190,
                 target={"name": "llvm", "params": {"arch": "aarch64", "mcpu": "cortex-a73",
                                                    "threads": 4}})
    assert board.rpc is not None and (board.rpc.host, board.rpc.port) == ("lab", 9190)
    assert board.rpc.key == "hikey970" and board.unmeasurable is None
    assert board.tvm_target["mtriple"] == "aarch64-linux-gnu" and board.num_threads == 4
    assert board.fingerprint["rpc_key"] == "hikey970"
    other = spec("remote", key="hikey970-2", tracker_host="lab",
                 target={"name": "llvm", "params": {"arch": "aarch64", "mcpu": "cortex-a73",
                                                    "threads": 4}})
    assert other.fingerprint != board.fingerprint  # two boards never share a measurement
    # nothing about this machine leaks into a board's target
    plain = spec("remote", key="b", target="llvm")
    assert plain.tvm_target["mcpu"] == "generic" and "num-cores" not in plain.tvm_target
    assert plain.num_threads is None and plain.fingerprint["target"]["cpu"] is None


def test_remote_board_target_is_validated() -> None:
    assert "Did you mean 'llvm'?" in invalid("remote", key="k", target="llvmm")
    assert "`host` is the machine running dlas" in invalid("remote", key="k", target="host")
    assert "needs its arch" in invalid("remote", key="k", target={"name": "cuda"})
    assert "unknown arch" in invalid("remote", key="k",
                                     target={"name": "llvm", "params": {"arch": "mips"}})
    assert "key" in invalid("remote")


# -- code generation -----------------------------------------------------------------------

def test_aarch64_codegen_uses_neon() -> None:
    """TVM builds TIR for the aarch64 triple here, and a vectorized loop becomes Neon."""
    from tvm import te

    a = te.placeholder((64,), name="a")
    b = te.compute((64,), lambda i: a[i] * 2.0 + 1.0, name="b")
    sch = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    outer, inner = sch.split(sch.get_loops(sch.get_sblock("b"))[0], factors=[None, 4])
    sch.vectorize(inner)
    target = tvm.target.Target(spec("llvm", arch="aarch64").tvm_target)
    lib = tvm.compile(sch.mod, target=target)
    asm = lib.mod.inspect_source("asm")
    assert "v0.4s" in asm or ".4s" in asm  # 128-bit Neon lanes of four floats


@pytest.fixture(scope="module")
def tiny_imported() -> ImportedModel:
    from tests.plugins.tiny_cnn import TinyCNN

    torch.manual_seed(0)
    model = TinyCNN(10).eval()
    with torch.no_grad():  # pruned, so the CSR algorithms have something to skip
        for p in model.parameters():
            p.mul_((torch.rand_like(p) > 0.5).float())
    return import_torch_model(model, (1, 3, 8, 8))


def algorithm(name: str):
    option = registry.get("algorithms", name)
    return option.fn(option.parse_params({}))


def test_aarch64_model_exports_objects_for_the_board(tiny_imported: ImportedModel,
                                                     tmp_path: Path) -> None:
    target = spec("llvm", arch="aarch64", threads=4).tvm_target
    result = compile_model(tiny_imported, algorithm("direct"), target, tmp_path)
    assert result.executable_path.name == "model.tar"  # linked by the board's rpc_server
    assert result.executable_path.stat().st_size > 0


@pytest.mark.parametrize("name", ["direct", "direct_csr", "spatial_pack_csr"])
def test_cuda_compile_binds_every_kernel(tiny_imported: ImportedModel, tmp_path: Path,
                                         name: str) -> None:
    """A CUDA target compiles with no GPU here: every PrimFunc bound to blocks/threads,
    CUDA source in the library (checked by nvcc when there is one)."""
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.compiler.gpu_schedule import apply_gpu_schedules

    target = make_target(spec("cuda", arch="sm_80").tvm_target)
    mod, _ = lower_to_tir(tiny_imported.mod, tiny_imported.params, algorithm(name), target)
    bound, _ = apply_gpu_schedules(mod, target)
    for gvar, func in bound.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            assert "threadIdx.x" in func.script(), gvar.name_hint
    result = compile_model(tiny_imported, algorithm(name), target, tmp_path)
    assert result.executable_path.name == "model.so" and result.executable_path.exists()
    # scheduling, code generation and nvcc's check of the device code are timed apart
    assert {"schedule", "codegen", "device_check"} <= set(result.phases), result.phases


def _is_depthwise(func: tvm.tirx.PrimFunc) -> bool:
    from tvm import s_tir

    from dlas.tir.conv_spec import conv_spec_of
    from dlas.tir.schedule_helpers import leaf_blocks

    sch = s_tir.Schedule(func)
    specs = [conv_spec_of(sch, b) for b in leaf_blocks(sch)]
    return any(spec is not None and spec.is_depthwise for spec in specs)


@pytest.mark.parametrize("name", ["direct", "gemm", "spatial_pack"])
def test_dense_convs_get_their_algorithms_gpu_schedule_unless_bindings_asked(
        tiny_imported: ImportedModel, name: str) -> None:
    """Each dense algorithm's untuned GPU schedule (its folder's `gpu.py`) tiles its plain
    convs in shared memory (an implicit GEMM); the depthwise conv, which it cannot tile,
    keeps the thread binding; `schedules: bindings` binds every kernel only. Both build,
    and nvcc compiles the CUDA source where it is on PATH."""
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.compiler.gpu_schedule import (
        apply_gpu_schedules,
        build_gpu,
        check_device_code,
        conv_algorithm_of,
    )

    algo = algorithm(name)
    tiled = spec("cuda", arch="sm_80")
    bound = spec("cuda", arch="sm_80", schedules="bindings")
    assert tiled.gpu_schedules == "algorithm" and bound.gpu_schedules == "bindings"
    target = make_target(tiled.tvm_target)
    rules = {a.name: a.gpu_schedule for a in (algo, algo.fallback()) if a}
    shared: dict[str, bool] = {}
    for rules_now, expect_tiles in ((rules, True), (None, False)):
        # scheduling writes into the module: each pass starts from a fresh one
        mod, _ = lower_to_tir(tiny_imported.mod, tiny_imported.params, algo, target)
        convs = {gvar.name_hint for gvar, func in mod.functions_items()
                 if isinstance(func, tvm.tirx.PrimFunc) and conv_algorithm_of(func)}
        depthwise = {name for name in convs if _is_depthwise(mod[name])}
        scheduled, _ = apply_gpu_schedules(mod, target, rules=rules_now)
        for gvar, func in scheduled.functions_items():
            if gvar.name_hint in convs:
                shared[gvar.name_hint] = '"shared' in func.script()
        plain = sorted(convs - depthwise)
        assert len(plain) == 2 and len(depthwise) == 1, (convs, depthwise)
        assert all(shared[n] is expect_tiles for n in plain), shared
        assert not any(shared[n] for n in depthwise), shared
        mod, _ = lower_to_tir(tiny_imported.mod, tiny_imported.params, algo, target)
        executable, _ = build_gpu(mod, target, rules=rules_now)
        if shutil.which("nvcc"):
            assert "nvcc for sm_80" in check_device_code(executable, target)


def test_split_reduction_lane_count_follows_the_reduction() -> None:
    """A reduction of K terms is split over the most lanes (a power of two, at most a
    warp) that leave each lane 8 terms; under 4 lanes it is not split at all."""
    from dlas.algorithms.gpu_split_reduction import lanes_for

    assert [lanes_for(k) for k in (9, 27, 31, 32, 63, 64, 144, 256, 2304)] == [
        0, 0, 0, 4, 4, 8, 16, 32, 32]


@pytest.mark.parametrize("name", ["direct", "gemm", "spatial_pack"])
def test_reduction_schedules_split_a_convs_terms_over_a_warps_lanes(name: str,
                                                                    tmp_path: Path) -> None:
    """`cuda(schedules=reduction)`: each dense conv whose reduction is long enough has it
    split over `threadIdx.x` lanes (a cross-thread reduction), a few outputs a block on
    `threadIdx.y`, its epilogue after the sum; a short reduction (the first conv's 27
    terms) and a depthwise conv (9) keep the thread binding. It compiles, nvcc checks the
    device code where it is on PATH, and the compile records the family."""
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.compiler.gpu_schedule import apply_gpu_schedules, conv_algorithm_of, untuned_rules

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = torch.nn.Conv2d(3, 16, 3, padding=1)      # K = 27: binding
            self.wide = torch.nn.Conv2d(16, 32, 3, padding=1)      # K = 144: 16 lanes
            self.depthwise = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)  # K = 9

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.depthwise(torch.relu(self.wide(torch.relu(self.first(x)))))

    torch.manual_seed(0)
    imported = import_torch_model(Net().eval(), (1, 3, 8, 8))
    reduction = spec("cuda", arch="sm_90", schedules="reduction")
    assert reduction.gpu_schedules == "reduction"
    target = make_target(reduction.tvm_target)
    algo = algorithm(name)
    mod, _ = lower_to_tir(imported.mod, imported.params, algo, target)
    convs = {gv.name_hint for gv, f in mod.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc) and conv_algorithm_of(f)}
    scheduled, _ = apply_gpu_schedules(mod, target,
                                       rules=untuned_rules("reduction", [algo, algo.fallback()]))
    lanes = {}
    for gvar, func in scheduled.functions_items():
        if gvar.name_hint in convs:
            text = func.script()
            lanes[gvar.name_hint] = ('thread="threadIdx.y"' in text
                                     and "T.axis.reduce" in text.split('thread="threadIdx.x"')[-1]
                                     and 'thread="threadIdx.x"' in text)
    assert sorted(lanes.values()) == [False, False, True], lanes
    result = compile_model(imported, algo, target, tmp_path, gpu_schedules="reduction")
    assert result.executable_path.exists()
    with pytest.raises(ValueError, match="unknown GPU schedule family"):
        untuned_rules("tiles", [algo])


def test_cuda_graph_option_captures_the_models_kernels(
        tiny_imported: ImportedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`cuda_graph: true` builds the model in Relax's CUDA-graph rewrite: the kernels on the
    model's own buffers move into a capture function replayed by `run_or_capture`; without
    it the pipeline leaves `main` alone. compile_model builds in the target's config."""
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.compiler.gpu_schedule import apply_gpu_schedules
    from dlas.compiler.pipeline import relax_finalize_pipeline
    from dlas.targets.options import CUDA_GRAPH_CONFIG

    graph, plain = spec("cuda", arch="sm_80", cuda_graph=True), spec("cuda", arch="sm_80")
    assert graph.pass_config == {CUDA_GRAPH_CONFIG: True} and plain.pass_config == {}
    target = make_target(graph.tvm_target)
    mod, _ = lower_to_tir(tiny_imported.mod, tiny_imported.params, algorithm("direct"), target)
    mod, _ = apply_gpu_schedules(mod, target)
    for config, captured in ((graph.pass_config, True), (plain.pass_config, False)):
        with tvm.transform.PassContext(config=config):
            lowered = relax_finalize_pipeline(target)(mod)
        names = {gv.name_hint for gv, f in lowered.functions_items()
                 if isinstance(f, tvm.relax.Function)}
        assert ("main_cuda_graph_capture" in names) is captured, names
        assert ("cuda_graph.run_or_capture" in lowered.script()) is captured

    import dlas.compiler.gpu_schedule as gpu_schedule

    seen: list[bool] = []
    real_compile = tvm.compile

    def compile_and_record(*args: object, **kwargs: object) -> object:
        config = tvm.transform.PassContext.current().config
        seen.append(bool(config.get(CUDA_GRAPH_CONFIG, False)))
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(gpu_schedule.tvm, "compile", compile_and_record)
    compile_model(tiny_imported, algorithm("direct"), graph.tvm_target, tmp_path,
                  pass_config=graph.pass_config)
    assert seen == [True]


def test_cuda_source_compiles_with_nvcc(tiny_imported: ImportedModel) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH: cannot check the generated CUDA source")
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.compiler.gpu_schedule import build_gpu, check_device_code, cuda_sources

    target = make_target(spec("cuda", arch="sm_80").tvm_target)
    mod, _ = lower_to_tir(tiny_imported.mod, tiny_imported.params, algorithm("gemm_csr"),
                          target)
    executable, _ = build_gpu(mod, target)
    sources = cuda_sources(executable)
    assert sources and "__global__" in sources[0] and "threadIdx.x" in sources[0]
    assert "nvcc for sm_80" in check_device_code(executable, target)


@NO_GPU_HERE
def test_cuda_point_is_compiled_then_not_runnable(tmp_path: Path, shared_cache: Path) -> None:
    text = tiny_sweep("cuda").replace("targets: [host]",
                                      "targets:\n  - name: cuda\n    params: {arch: sm_80}")
    report = Runner(Workspace(tmp_path, shared_cache), progress=False).run(parse_config(text))
    assert report.not_runnable == 1 and report.failed == 0
    assert report.computed["compile"] + report.reused["compile"] == 1  # compiled, cached
    assert report.computed["measure"] == 0
    with ResultStore(tmp_path / "results.db") as store:
        row = store.rows()[0]
    assert row.status == "not_runnable" and row.error == NO_GPU
    assert row.compile_s is not None and np.isfinite(row.compile_s)


@pytest.mark.parametrize("name", ["gemm", "direct_csr"])
def test_cuda_minimal_candidates_build_and_replay(tiny_imported: ImportedModel,
                                                  name: str) -> None:
    """A tuned CUDA point first measures each task's untuned schedule as a candidate: on
    a GPU that is the algorithm's GPU schedule or the thread binding (`schedule_gpu_func`),
    not the CPU's loops, which do not compile for a GPU (found on the H100: every
    candidate failed to build). Each
    candidate builds for the GPU, and its trace replays on the unscheduled task, as
    `MetaScheduleApplyDatabase` replays it."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.tuning.metaschedule.minimal_candidate import minimal_schedule
    from dlas.tuning.metaschedule.tasks import extract

    target = make_target(spec("cuda", arch="sm_80").tvm_target)
    assert int(target.attrs["max_threads_per_block"]) == 1024  # MetaSchedule needs it
    mod, _ = lower_to_tir(tiny_imported.mod, tiny_imported.params, algorithm(name), target)
    tasks = extract(mod, target)
    assert tasks
    algo = algorithm(name)
    rules = {a.name: a.gpu_schedule for a in (algo, algo.fallback()) if a}
    schedules = [minimal_schedule(task, {}, target, 0, rules) for task in tasks]
    for task, sch in zip(tasks, schedules, strict=True):
        assert "threadIdx.x" in sch.mod.script(), task.name
        replayed = s_tir.Schedule(task.mod)
        sch.trace.apply_to_schedule(replayed, remove_postproc=False)
        tvm.ir.assert_structural_equal(replayed.mod, sch.mod)
    if name == "gemm":  # the implicit GEMM's tiles, not only the binding, replay too
        assert any('"shared' in sch.mod.script() for sch in schedules)
    if name == "gemm" and shutil.which("nvcc") is not None:  # one build, as tuning builds
        from dlas.tuning.metaschedule.build_worker import build_candidate

        # the tuner's build function (MetaSchedule's default one first registers every
        # tensor intrinsic TVM has: 92 s of this test on a 2-core Zen 3)
        builder = ms.builder.LocalBuilder(max_workers=1, timeout_sec=120, f_build=build_candidate)
        (built,) = builder.build([ms.builder.BuilderInput(schedules[0].mod, target)])
        assert not built.error_msg, built.error_msg


def test_cuda_search_samples_its_first_population() -> None:
    """On a GPU few random schedules of a small conv pass `VerifyGPUCode` (~5% here); with
    MetaSchedule's default 5 empty sampling rounds, the H100's tuned point of this model
    got no candidate at all ("Cannot sample enough initial population") and 0 trials. The
    session's strategy samples until it has a population (seed 5 failed before)."""
    from tvm.s_tir import meta_schedule as ms

    from dlas._compat.tensor_intrin import register_for
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.tuning.metaschedule.tasks import extract
    from dlas.tuning.metaschedule.tune import evolutionary_search
    from tests.plugins.tiny_cnn import TinyCNN

    torch.manual_seed(0)
    imported = import_torch_model(TinyCNN(10).eval(), (1, 3, 32, 32))
    target = make_target(spec("cuda", arch="sm_90").tvm_target)
    mod, _ = lower_to_tir(imported.mod, imported.params, algorithm("direct"), target)
    task = next(t for t in extract(mod, target) if "add_relu_add" in t.name)
    register_for(target)  # as a session does first: CUDA's tensor-core rules need them
    ctx = ms.TuneContext(mod=task.mod, target=target, space_generator="post-order-apply",
                         search_strategy=evolutionary_search(8), task_name=task.name,
                         num_threads=2, rand_state=5)
    ctx.pre_tuning(max_trials=4, num_trials_per_iter=4, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    candidates = ctx.generate_measure_candidates()
    assert candidates is not None and len(candidates) == 4


def test_cuda_sparse_search_samples_real_gpu_candidates() -> None:
    """A tuned sparse point on a GPU searches its own space (`gpu_csr_space`): the row
    kernels' threads per block and unrolling sampled, every candidate bound to threads
    and passing the GPU's limits; one builds with the tuner's build function (nvcc)."""
    from tvm.s_tir import meta_schedule as ms

    from dlas._compat.tensor_intrin import register_for
    from dlas.compiler.build import lower_to_tir, make_target
    from dlas.tuning.metaschedule.sparse_space import gpu_csr_space
    from dlas.tuning.metaschedule.tasks import extract
    from dlas.tuning.metaschedule.tune import evolutionary_search
    from tests.plugins.tiny_cnn import TinyCNN

    torch.manual_seed(0)
    model = TinyCNN(10).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_((torch.rand_like(p) > 0.5).float())
    imported = import_torch_model(model, (1, 3, 32, 32))  # 16x16 outputs: threads to choose
    target = make_target(spec("cuda", arch="sm_90").tvm_target)
    mod, _ = lower_to_tir(imported.mod, imported.params, algorithm("direct_csr"), target)
    task = next(t for t in extract(mod, target) if t.kind == "sparse")
    register_for(target)  # as a session does first (else MetaSchedule registers all: ~70 s)
    ctx = ms.TuneContext(mod=task.mod, target=target, space_generator=gpu_csr_space(target),
                         search_strategy=evolutionary_search(8), task_name=task.name,
                         num_threads=2, rand_state=3)
    ctx.pre_tuning(max_trials=8, num_trials_per_iter=8, design_spaces=ctx.generate_design_space(),
                   database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    candidates = ctx.generate_measure_candidates()
    assert candidates is not None and len(candidates) >= 2
    scripts = [c.sch.mod.script() for c in candidates]
    assert all("threadIdx.x" in s for s in scripts)
    assert len(set(scripts)) >= 2  # the decisions differ between candidates
    if shutil.which("nvcc") is not None:
        from dlas.tuning.metaschedule.build_worker import build_candidate

        builder = ms.builder.LocalBuilder(max_workers=1, timeout_sec=120, f_build=build_candidate)
        (built,) = builder.build([ms.builder.BuilderInput(candidates[0].sch.mod, target)])
        assert not built.error_msg, built.error_msg


@pytest.mark.parametrize(("dtype", "out", "tiled"), [("float32", "float32", True),
                                                     ("float16", "float32", True),
                                                     ("int8", "int32", False)])
def test_implicit_gemm_takes_float_convs_and_leaves_int8_to_the_binding(
        dtype: str, out: str, tiled: bool) -> None:
    """The implicit-GEMM rule tiles float products; an int8 one keeps the thread binding
    until a GPU has checked dlight's int8 path (`UNCHECKED_DTYPES`)."""
    from tvm import te

    from dlas.algorithms.gpu_implicit_gemm import implicit_gemm_schedule
    from dlas.compiler.build import make_target

    a = te.placeholder((128, 128), dtype, name="A")
    b = te.placeholder((128, 128), dtype, name="B")
    k = te.reduce_axis((0, 128), name="k")
    c = te.compute((128, 128), lambda i, j: te.sum(a[i, k].astype(out) * b[j, k].astype(out),
                                                   axis=k), name="C")
    func = te.create_prim_func([a, b, c])
    target = make_target(spec("cuda", arch="sm_80").tvm_target)
    with target:
        scheduled = implicit_gemm_schedule(func, target)
    assert (scheduled is not None) is tiled
    if tiled:
        assert '"shared' in scheduled.mod.script()
