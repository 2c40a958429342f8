"""The pixel-tile sparse kernel's tunable decisions (dlas/algorithms/spmm_rebuild.py):
every decision a search may take builds a correct kernel, the build turns a block's
requests into its body, and the sparse search space samples them into traces that
replay."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch
import tvm
from tvm import s_tir, te

from dlas import registry
from dlas.algorithms.base import ConvSpec, conv_prim_func
from dlas.algorithms.spmm_kernel import BUILT_ATTR, spmm_kernel
from dlas.algorithms.spmm_rebuild import ORDERS, REQUESTS, choices, rebuild_requested
from dlas.algorithms.spmm_tiling import built_of, misfit
from dlas.compiler.build import make_target
from dlas.targets.host import host_target
from dlas.tir.schedule_helpers import leaf_blocks
from dlas.tuning.metaschedule.sparse_space import sample_spmm_decisions

TARGET = make_target(host_target(2))
#: (C, O, H, kernel, stride, groups): convs whose tilings offer every decision.
CONVS = [(24, 32, 16, 3, 1, 1), (16, 32, 12, 1, 1, 1), (16, 16, 9, 3, 2, 16)]


def _spec(conv: tuple) -> ConvSpec:
    c, o, h, k, s, g = conv
    return ConvSpec((1, c, h, h), (o, c // g, k, k), (s, s), (k // 2,) * 4, (1, 1), g,
                    "float32", "float32", "float32")


def _operands(spec: ConvSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(spec.data_shape).astype(np.float32)
    w = rng.standard_normal(spec.weight_shape).astype(np.float32)
    w[rng.random(w.shape) < 0.6] = 0
    return x, w


def _kernel_block(sch: s_tir.Schedule) -> s_tir.schedule.SBlockRV:
    (block,) = [b for b in leaf_blocks(sch) if BUILT_ATTR in sch.get(b).annotations]
    return block


def _run(func: tvm.tirx.PrimFunc, arrays: list, spec: ConvSpec, x: np.ndarray) -> np.ndarray:
    lib = tvm.compile(func, target=TARGET)
    out = tvm.runtime.tensor(np.zeros(spec.out_shape, np.float32))
    lib["main"](tvm.runtime.tensor(x), *[tvm.runtime.tensor(a) for a in arrays], out)
    return out.numpy()


@pytest.mark.parametrize("name", ["direct_csr", "gemm_csr", "spatial_pack_csr"])
def test_every_requested_decision_builds_a_correct_kernel(name: str) -> None:
    for i, conv in enumerate(CONVS):
        spec = _spec(conv)
        x, w = _operands(spec, i)
        ref = torch.nn.functional.conv2d(
            torch.from_numpy(x), torch.from_numpy(w), stride=spec.strides,
            padding=spec.padding[:2], groups=spec.groups).numpy()
        algorithm = registry.create("algorithms", name, {})
        if algorithm.unsupported_reason(spec) is not None:
            algorithm = algorithm.fallback()
        with TARGET:
            func, arrays = conv_prim_func(algorithm, spec, w)
            sch = s_tir.Schedule(func)
            grid, built = built_of(str(sch.get(_kernel_block(sch)).annotations[BUILT_ATTR]))
            options = choices(grid, built)
        assert built.vectors in options["vectors"] and 1 in options["merge"]
        tried = 0
        for vectors, merge, order in itertools.product(*options.values()):
            sch = s_tir.Schedule(func)
            block = _kernel_block(sch)
            for key, value in zip(REQUESTS.values(), (vectors, merge, order), strict=True):
                sch.annotate(block, key, value)
            with TARGET:
                rebuilt = rebuild_requested(tvm.IRModule({"main": sch.mod["main"]}))["main"]
            after = s_tir.Schedule(rebuilt)
            _, now = built_of(str(after.get(_kernel_block(after)).annotations[BUILT_ATTR]))
            assert (now.vectors, now.merge, now.order) == (vectors, merge, ORDERS[order])
            got = _run(rebuilt, arrays, spec, x)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max(),
                                       err_msg=f"{name} {conv} {vectors, merge, order}")
            tried += 1
        assert tried == np.prod([len(v) for v in options.values()])


def test_unrequested_blocks_are_left_alone() -> None:
    spec = _spec(CONVS[0])
    _, w = _operands(spec, 0)
    with TARGET:
        func, _ = conv_prim_func(registry.create("algorithms", "spatial_pack_csr", {}),
                                 spec, w)
        mod = tvm.IRModule({"main": func})
        assert rebuild_requested(mod)["main"].same_as(func)


def test_the_sparse_space_samples_the_decisions_into_a_replayable_trace() -> None:
    spec = _spec(CONVS[0])
    x, w = _operands(spec, 0)
    with TARGET:
        func, arrays = conv_prim_func(registry.create("algorithms", "spatial_pack_csr", {}),
                                      spec, w, schedule=False)
    seen = set()
    for seed in range(1, 9):
        sch = s_tir.Schedule(func, seed=seed)
        with TARGET:
            assert sample_spmm_decisions(sch) == 1
        trace = str(sch.trace)
        assert "sample_categorical" in trace and REQUESTS["vectors"] in trace
        replayed = s_tir.Schedule(func)
        sch.trace.apply_to_schedule(replayed, remove_postproc=False)
        tvm.ir.assert_structural_equal(replayed.mod, sch.mod)
        annotations = sch.get(_kernel_block(sch)).annotations
        seen.add(tuple(int(annotations[k]) for k in REQUESTS.values() if k in annotations))
    assert len(seen) > 1  # the decisions vary between samples


def test_a_request_the_block_cannot_take_is_not_built() -> None:
    """A transferred trace (`dlas.tuning.metaschedule.transfer`) replays the source task's
    sampled decisions, drawn from the source's choices: a `merge` that divides the source's
    stored chunks need not divide the task's. The kernel then took `chunks // merge`
    merged chunks and skipped the rest: it ran 12-23x faster than its minimal schedule,
    was committed as the task's best, and ten tuned CSR points of the day profile failed
    verification (Zen 4, 2026-11-29). Now the block keeps its own decision where a request
    misfits and takes the requests that fit (a correct kernel, and what the candidate is
    then measured as), and the kernel refuses to be built with such a tiling at all."""
    spec = _spec(CONVS[0])
    x, w = _operands(spec, 0)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                     padding=spec.padding[:2]).numpy()
    with TARGET:
        func, arrays = conv_prim_func(registry.create("algorithms", "spatial_pack_csr", {}),
                                      spec, w)
        sch = s_tir.Schedule(func)
        grid, built = built_of(str(sch.get(_kernel_block(sch)).annotations[BUILT_ATTR]))
        allowed = choices(grid, built)
    bad_merge = next(m for m in range(2, built.chunks + 2) if built.chunks % m)
    assert bad_merge not in allowed["merge"]
    assert "skip chunks" in str(misfit(grid, replace(built, merge=bad_merge)))
    with pytest.raises(ValueError, match="skip chunks"):
        spmm_kernel("k", spec, grid, replace(built, merge=bad_merge),
                    shapes=tuple(te.placeholder(a.shape, str(a.dtype)) for a in
                                 [x, *arrays]))  # type: ignore[arg-type]
    other_order = 1 - ORDERS.index(built.order)
    for merge in (bad_merge, max(allowed["merge"])):
        sch = s_tir.Schedule(func)
        sch.annotate(_kernel_block(sch), REQUESTS["merge"], merge)
        # a fitting request beside a misfit one is still taken
        sch.annotate(_kernel_block(sch), REQUESTS["order"], other_order)
        with TARGET:
            rebuilt = rebuild_requested(tvm.IRModule({"main": sch.mod["main"]}))["main"]
        after = s_tir.Schedule(rebuilt)
        _, now = built_of(str(after.get(_kernel_block(after)).annotations[BUILT_ATTR]))
        assert now.merge == (built.merge if merge == bad_merge else merge)
        assert now.order == ORDERS[other_order]
        np.testing.assert_allclose(_run(rebuilt, arrays, spec, x), ref, rtol=1e-4,
                                   atol=1e-4 * np.abs(ref).max(), err_msg=f"merge {merge}")
