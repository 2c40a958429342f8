"""The vector layouts (NHWC, NCHWc) against PyTorch: random convs, both SIMD paths, the
layout pass over whole graphs.

Convolutions: seeded random shapes (odd channel counts, non-square images and kernels,
strides, asymmetric padding, dilation, depthwise) for every dense algorithm in NHWC,
NCHWc, and NCHW-in/NCHWc-out (the image's conv). Each runs twice: shaped for AVX-512
(16-channel blocks, 32 registers) and for AVX2 (8-channel blocks, 16 registers), the
choice forced (`forced_simd`), so both paths run on any x86 machine. NCHWc pads channels
to whole blocks with zero weights, as the layout pass does, and the padded lanes' output
is not compared (nothing reads it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

from dlas import registry
from dlas.algorithms.base import ConvSpec, conv_prim_func
from dlas.algorithms.blocked import blocking_of, pack_weight
from dlas.algorithms.microkernel import accumulator_budget, choose_tile, tile_for
from dlas.compiler.build import make_target, model_layout
from dlas.compiler.fold import fold_constants
from dlas.compiler.layout import convert_layout
from dlas.compiler.relax_import import import_torch_model
from dlas.targets.host import host_target
from dlas.tir.layout import DataLayout
from dlas.tir.schedule_helpers import Simd, forced_simd, target_simd

from .test_algorithms import ROWS, STRIDE, case_id

TARGET = make_target(host_target())
DENSE = ["direct", "gemm", "spatial_pack"]
#: name -> (vector unit the schedules are shaped for, NCHWc's block on it)
PATHS = {"avx512": (Simd(512, 32), 16), "avx2": (Simd(256, 16), 8)}


@dataclass(frozen=True)
class Conv:
    """A logical (unpadded) conv to test."""

    c: int
    o: int
    h: int
    w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    depthwise: bool

    def __str__(self) -> str:
        kind = "dw" if self.depthwise else ""
        return (f"{self.c}x{self.h}x{self.w}-o{self.o}-k{self.kernel}s{self.stride}"
                f"p{self.padding}d{self.dilation}{kind}")


def random_convs(seed: int, count: int) -> list[Conv]:
    rng = np.random.default_rng(seed)
    out: list[Conv] = []
    while len(out) < count:
        depthwise = rng.random() < 0.3
        c = int(rng.choice([1, 3, 5, 8, 13, 16, 24, 33]))
        o = c if depthwise else int(rng.choice([1, 7, 8, 16, 20, 32, 40]))
        kernel = tuple(int(k) for k in rng.choice([1, 3, 5], 2)) if rng.random() < 0.3 \
            else (3, 3)
        dilation = (2, 2) if rng.random() < 0.15 else (1, 1)
        padding = tuple(int(p) for p in rng.integers(0, max(kernel), 4))
        conv = Conv(c, o, int(rng.integers(3, 18)), int(rng.integers(3, 18)), kernel,
                    tuple(int(s) for s in rng.choice([1, 2], 2)), padding, dilation,
                    depthwise)
        reach = [(k - 1) * d + 1 for k, d in zip(conv.kernel, conv.dilation, strict=True)]
        if conv.h + padding[0] + padding[2] >= reach[0] and \
                conv.w + padding[1] + padding[3] >= reach[1]:
            out.append(conv)
    return out


CONVS = random_convs(seed=7, count=8)
#: Convs wider than the random ones: NHWC holds all C channels in one chunk, so a
#: format's per-channel fields must take more than 64 of them (vector CSR did not).
WIDE = [Conv(72, 12, 6, 6, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False),
        Conv(130, 16, 5, 5, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)]


def laid_out(conv: Conv, data_layout: DataLayout, out_layout: DataLayout, dtypes=(
        "float32", "float32", "float32")) -> ConvSpec:
    """The spec the layout pass would give `conv`: channels padded to whole blocks."""
    c = data_layout.physical_channels(conv.c)
    o = out_layout.physical_channels(conv.o)
    if conv.depthwise:
        c = o = max(c, o)
    groups = c if conv.depthwise else 1
    return ConvSpec((1, c, conv.h, conv.w), (o, c // groups, *conv.kernel), conv.stride,
                    conv.padding, conv.dilation, groups, *dtypes, data_layout.name,
                    out_layout.name)


def operands(conv: Conv, spec: ConvSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Data and weight at the spec's (padded) shapes, zero in the padding."""
    rng = np.random.default_rng(seed)
    x = np.zeros(spec.data_shape, spec.data_dtype)
    w = np.zeros(spec.weight_shape, spec.weight_dtype)
    if spec.data_dtype in ("uint8", "int8"):
        low = 0 if spec.data_dtype == "uint8" else -128
        x[:, :conv.c] = rng.integers(low, low + 256, (1, conv.c, conv.h, conv.w))
        w[:conv.o, :w.shape[1] if conv.depthwise else conv.c] = rng.integers(
            -128, 128, (conv.o, 1 if conv.depthwise else conv.c, *conv.kernel))
    else:
        x[:, :conv.c] = rng.standard_normal((1, conv.c, conv.h, conv.w))
        w[:conv.o, :1 if conv.depthwise else conv.c] = rng.standard_normal(
            (conv.o, 1 if conv.depthwise else conv.c, *conv.kernel))
    return x, w


def run_conv(name: str, spec: ConvSpec, x: np.ndarray, w: np.ndarray,
             target: tvm.target.Target = TARGET) -> np.ndarray:
    """`spec` computed by algorithm `name` (or its fallback) for `target` (code this CPU
    runs), back in NCHW."""
    algorithm = registry.create("algorithms", name, {"layout": spec.out_layout_.kind})
    if algorithm.unsupported_reason(spec) is not None:
        assert name == "spatial_pack" and spec.groups > 1
        algorithm = algorithm.fallback()
    with target:
        func, arrays = conv_prim_func(algorithm, spec, w)
    lib = tvm.compile(func, target=target)
    out = tvm.runtime.tensor(np.zeros(spec.stored_out_shape, spec.out_dtype))
    data = spec.data_layout_.from_nchw(x)
    lib["main"](tvm.runtime.tensor(data), *[tvm.runtime.tensor(a) for a in arrays], out)
    return spec.out_layout_.to_nchw(out.numpy(), spec.out_channels)


def reference(conv: Conv, spec: ConvSpec, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    pt, pl, pb, pr = spec.padding
    xt = torch.nn.functional.pad(torch.from_numpy(x.astype(np.float64)), (pl, pr, pt, pb))
    return torch.nn.functional.conv2d(xt, torch.from_numpy(w.astype(np.float64)),
                                      stride=spec.strides, dilation=spec.dilation,
                                      groups=spec.groups).numpy()


def compare(conv: Conv, spec: ConvSpec, got: np.ndarray, ref: np.ndarray) -> None:
    got, ref = got[:, :conv.o].astype(np.float64), ref[:, :conv.o]
    scale = max(1.0, float(np.abs(ref).max()))
    if spec.out_dtype == "int32":
        np.testing.assert_array_equal(got, ref)
    elif spec.out_dtype == "float16":
        np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * scale)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)


def check_against_pytorch(conv: Conv, spec: ConvSpec, got: np.ndarray, x: np.ndarray,
                          w: np.ndarray, label: str) -> None:
    """`compare` against PyTorch's conv, the case named in a failure."""
    try:
        compare(conv, spec, got, reference(conv, spec, x, w))
    except AssertionError as err:
        raise AssertionError(f"{label}: {conv}\n{err}") from None


def layouts_of(case: str, block: int, conv: Conv) -> tuple[DataLayout, DataLayout]:
    blocked = DataLayout("NCHWc", block)
    if case == "NHWC":
        return DataLayout("NHWC"), DataLayout("NHWC")
    if case == "NCHW->NCHWc" and not conv.depthwise:
        return DataLayout("NCHW"), blocked
    return blocked, blocked


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("case", ["NCHWc", "NHWC", "NCHW->NCHWc"])
def test_random_convs_match_pytorch(path: str, name: str, case: str) -> None:
    simd, block = PATHS[path]
    for i, conv in enumerate(CONVS):
        spec = laid_out(conv, *layouts_of(case, block, conv))
        x, w = operands(conv, spec, seed=i)
        with forced_simd(simd.bits, simd.registers):
            got = run_conv(name, spec, x, w)
        check_against_pytorch(conv, spec, got, x, w, f"{name} {case} {path}")


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", ["NCHWc", "NHWC", "NCHW->NCHWc"])
def test_random_sparse_convs_in_vector_csr(path: str, case: str) -> None:
    """direct_csr's block-CSR form: random sparsity (50-99%, and a fully pruned first
    block row), so rows of every length occur, columns whole vectors pruned are skipped."""
    simd, block = PATHS[path]
    rng = np.random.default_rng(11)
    for i, conv in enumerate(CONVS + WIDE):
        spec = laid_out(conv, *layouts_of(case, block, conv))
        x, w = operands(conv, spec, seed=i)
        w[rng.random(w.shape) < rng.uniform(0.5, 0.99)] = 0
        w[:block] = 0
        with forced_simd(simd.bits, simd.registers):
            got = run_conv("direct_csr", spec, x, w)
        check_against_pytorch(conv, spec, got, x, w, f"direct_csr {case} {path}")


def test_block_csr_skips_columns_the_whole_vector_pruned() -> None:
    from dlas.algorithms.csr import block_csr_from_weight, csr_to_dense

    w = np.zeros((16, 4, 3, 3), "float32")
    w[3, 1, 2, 0] = 1.0  # block 0: one column
    w[9, 0, 0, 0] = w[12, 0, 0, 0] = 2.0  # block 1: one column, two lanes
    arrays = block_csr_from_weight(w, 8)
    assert arrays["csr_data"].shape == (2, 8)
    assert list(arrays["csr_indptr"]) == [0, 1, 2]
    assert list(arrays["csr_indices"]) == [1 * 9 + 2 * 3 + 0, 0]
    np.testing.assert_array_equal(csr_to_dense(arrays, w.shape), w)
    empty = block_csr_from_weight(np.zeros((8, 2, 1, 1), "float32"), 8)
    assert list(empty["csr_indptr"]) == [0, 1]  # a stored zero keeps the row non-empty


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("dtypes", [("float16", "float16", "float16"),
                                    ("float16", "float16", "float32"),
                                    ("uint8", "int8", "int32"), ("int8", "int8", "int32")],
                         ids=["f16", "f16acc32", "u8", "i8"])
@pytest.mark.parametrize("case", ["NCHWc", "NHWC"])
def test_low_precision_in_vector_layouts(name: str, dtypes: tuple, case: str) -> None:
    block = max(target_simd(TARGET).bits // 32, 1)
    plain = Conv(13, 20, 9, 7, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    depthwise = Conv(24, 24, 9, 9, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True)
    for i, conv in enumerate((plain, depthwise)):
        spec = laid_out(conv, *layouts_of(case, block, conv), dtypes=dtypes)
        x, w = operands(conv, spec, seed=i)
        compare(conv, spec, run_conv(name, spec, x, w), reference(conv, spec, x, w))


def test_weights_are_packed_with_output_channels_innermost() -> None:
    conv = Conv(16, 32, 6, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    spec = laid_out(conv, DataLayout("NCHWc", 8), DataLayout("NCHWc", 8))
    w = np.arange(np.prod(spec.weight_shape), dtype="float32").reshape(spec.weight_shape)
    packed = pack_weight(spec, w)
    assert packed.shape == (4, 2, 3, 3, 8, 8)  # [O/8, C/8, KH, KW, 8 in, 8 out]
    # element [oc, ic, ky, kx, il, ol] is W[oc*8 + ol, ic*8 + il, ky, kx]
    assert packed[1, 1, 2, 0, 3, 5] == w[1 * 8 + 5, 1 * 8 + 3, 2, 0]


def test_tile_choice_fills_registers_and_divides_the_output() -> None:
    avx2, avx512 = PATHS["avx2"][0], PATHS["avx512"][0]
    # AVX2: 12 accumulators at most; 8 channel blocks x 16 columns -> 4 x 2 or 2 x 4
    tile = choose_tile(8, 16, 1, avx2)
    assert tile.oc_inner * tile.cols == 8 and 16 % tile.cols == 0
    # 12 columns admit 4 x 3 = 12 accumulators, fewer loads per FMA
    assert choose_tile(12, 12, 1, avx2).oc_inner * choose_tile(12, 12, 1, avx2).cols == 12
    # AVX-512: up to 24 accumulators
    big = choose_tile(8, 16, 1, avx512)
    assert 16 <= big.oc_inner * big.cols <= accumulator_budget(avx512)
    # a 16-channel block on AVX2 is two registers: half the tile
    wide = choose_tile(8, 16, 2, avx2)
    assert wide.oc_inner * wide.cols * 2 <= accumulator_budget(avx2)
    # depthwise: one channel block, columns only
    conv = Conv(32, 32, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True)
    spec = laid_out(conv, DataLayout("NCHWc", 8), DataLayout("NCHWc", 8))
    with forced_simd(256, 16):
        assert blocking_of(spec).depthwise and tile_for(spec).oc_inner == 1


def test_forced_simd_is_undone() -> None:
    real = target_simd(TARGET)
    with forced_simd(64, 2):
        assert target_simd(TARGET) == Simd(64, 2)
    assert target_simd(TARGET) == real


def test_simd_width_follows_the_target_not_this_machine() -> None:
    def simd(spec: dict) -> Simd:
        return target_simd(make_target(spec))

    assert simd({"kind": "llvm", "mcpu": "znver1"}) == Simd(256, 16)
    assert simd({"kind": "llvm", "mcpu": "skylake-avx512"}) == Simd(512, 32)
    # Zen 4: 512-bit registers (kernels shaped for them), 256-bit multiply-add units
    zen4 = simd({"kind": "llvm", "mcpu": "znver4"})
    assert (zen4.bits, zen4.registers, zen4.fma_bits) == (512, 32, 256)
    assert simd({"kind": "llvm", "mcpu": "cascadelake"}).fma_bits == 512
    assert simd({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}) \
        == Simd(128, 32)
    algorithm = registry.create("algorithms", "direct", {"layout": "NCHWc"})
    assert model_layout(algorithm, make_target({"kind": "llvm", "mcpu": "znver4"})).name \
        == "NCHW16c"
    assert model_layout(algorithm, make_target({"kind": "llvm", "mcpu": "znver3"})).name \
        == "NCHW8c"
    neon = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}
    assert model_layout(algorithm, make_target(neon)).name == "NCHW4c"
    forced = registry.create("algorithms", "direct", {"layout": "NCHWc", "block": 4})
    assert model_layout(forced, TARGET).name == "NCHW4c"


def _graph(name: str) -> tvm.IRModule:
    torch.manual_seed(0)
    model = registry.create("models", name, {"width_multiplier": 0.25}, num_classes=10,
                            input_shape=(3, 32, 32)).eval()
    imported = import_torch_model(model, (1, 3, 32, 32))
    mod = relax.transform.BindParams("main", imported.params)(imported.mod)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return fold_constants(mod)[0]


@pytest.mark.parametrize("name", ["resnet18", "mobilenetv2", "vgg16"])
@pytest.mark.parametrize("layout", ["NCHW8c", "NCHW16c", "NHWC"])
def test_layout_holds_between_convs(name: str, layout: str) -> None:
    """Every conv in the layout; reorders only at the edges: the image (NHWC; NCHWc
    reads it directly) and the global pool before the classifier."""
    out, report = convert_layout(_graph(name), DataLayout.parse(layout), lambda spec, weight: None)
    convs = sum(1 for b in out["main"].body.blocks for bd in b.bindings
                if getattr(getattr(bd.value, "op", None), "name", "") == "relax.nn.conv2d")
    assert report.convs == convs and not report.kept_nchw
    assert dict(report.to_nchw) == {"mean": 1}
    assert dict(report.to_layout) == ({"conv2d": 1} if layout == "NHWC" else {})
    assert report.summary().startswith(layout)


def test_convs_the_algorithm_cannot_compute_keep_nchw() -> None:
    report = convert_layout(_graph("mobilenetv2"), DataLayout("NCHWc", 8),
                            lambda spec, weight: "no" if spec.groups > 1 else None)[1]
    assert report.kept_nchw and all(line.endswith(": no") for line in report.kept_nchw)
    # each depthwise conv now reads NCHW and its output goes back into the layout
    assert report.to_nchw["conv2d"] == len(report.kept_nchw)
    assert report.to_layout["conv2d"] == len(report.kept_nchw)


def test_a_residual_path_behind_convs_kept_nchw_stays_nchw() -> None:
    """ResNet18 with its convs from 64 input channels kept in NCHW (where `mixed_csr`
    runs the sparse kernel): a residual add with operands in both forms is computed in
    the form that costs fewer reorders, counting those its result's convs will need, so
    the residual path follows the sparse convs into NCHW once and stays there. Every add
    taken in the layout, as before, cost 5 reorders: 2 per residual block behind sparse
    convs (into the layout for the add, back for the next conv) and the global pool's."""
    report = convert_layout(_graph("resnet18"), DataLayout.parse("NCHW8c"),
                            lambda spec, weight: "sparse" if spec.in_channels >= 64
                            else None)[1]
    assert len(report.kept_nchw) == 8
    # the first block at 64 channels: its input into NCHW for its conv, its shortcut (a
    # conv in the layout, from 32 channels) into NCHW for the add, whose result the next
    # sparse conv reads; nothing after that
    assert dict(report.to_nchw) == {"conv2d": 1, "add": 1}
    assert dict(report.to_layout) == {}
    # every conv in the layout: the adds stay there, nothing to reorder
    whole = convert_layout(_graph("resnet18"), DataLayout.parse("NCHW8c"),
                           lambda spec, weight: None)[1]
    assert dict(whole.to_nchw) == {"mean": 1} and not whole.to_layout
    # (that the rewritten model computes the same function is checked end to end by
    # test_sparse_models: mixed_csr on ResNet18 pruned 90% globally, against PyTorch)


def test_layout_params_keep_nchw_points_as_they_were() -> None:
    option = registry.get("algorithms", "direct")
    assert option.parse_params({}).model_dump(mode="json") == {}
    assert option.parse_params({"layout": "NCHW"}).model_dump(mode="json") == {}
    assert option.parse_params({"layout": "NCHWc", "block": 16}).model_dump(mode="json") \
        == {"layout": "NCHWc", "block": 16}
    with pytest.raises(ValueError, match="block is NCHWc's"):
        option.parse_params({"layout": "NHWC", "block": 8})
    with pytest.raises(ValueError, match="power of two"):
        option.parse_params({"layout": "NCHWc", "block": 12})
    with pytest.raises(ValueError):
        option.parse_params({"layout": "HWCN"})


def _table_conv(row: dict) -> Conv | None:
    """A paper conv (tests/data/paper_conv_shapes.json) as a `Conv`; None for grouped
    convs that are not depthwise (they keep NCHW in a model)."""
    _, c, h, w = row["data_shape"]
    o, _, kh, kw = row["weight_shape"]
    depthwise = row["groups"] > 1
    if depthwise and not row["groups"] == c == o:
        return None
    return Conv(c, o, h, w, (kh, kw), tuple(row["strides"]), tuple(row["padding"]),
                tuple(row["dilation"]), depthwise)


TABLE = [(case_id(r), conv) for r in ROWS if (conv := _table_conv(r)) is not None]


#: (algorithm, table index): direct on every conv of the table; GEMM and spatial pack,
#: whose kernels the random convs and the models above also cover, on every third (CI's
#: time: the three on all 240 took 2.5 min of it); DLAS_FULL_TABLE=N keeps every N-th
#: of those (`test_algorithms.full_table_stride`).
FULL_CASES = [(name, i) for name in DENSE for i in range(len(TABLE))
              if (name == "direct" or i % 3 == 0) and i % (STRIDE or len(TABLE)) == 0]


@pytest.mark.full_table
@pytest.mark.skipif(not STRIDE, reason="the full conv table runs with DLAS_FULL_TABLE=1")
@pytest.mark.parametrize(("name", "index"), FULL_CASES,
                         ids=[f"{name}-{TABLE[i][0]}" for name, i in FULL_CASES])
def test_full_table_in_nchwc(name: str, index: int) -> None:
    """The plain and depthwise convs of the paper's eight models in NCHWc at the
    target's block, float32 (NHWC indexes the same kernels differently: the random
    convs above cover it)."""
    conv = TABLE[index][1]
    block = max(target_simd(TARGET).bits // 32, 1)
    spec = laid_out(conv, *layouts_of("NCHWc", block, conv))
    x, w = operands(conv, spec, seed=index)
    compare(conv, spec, run_conv(name, spec, x, w), reference(conv, spec, x, w))


def test_vector_layouts_are_not_runnable_on_a_gpu_target() -> None:
    from dlas.sweep.config import parse_config
    from dlas.sweep.grid import expand

    from .conftest import tiny_sweep

    text = tiny_sweep(algorithms=["direct", "{name: direct, params: {layout: NCHWc}}"]) \
        .replace("targets: [host]", "targets: [host, {name: cuda, params: {arch: sm_90}}]")
    blocked = {(p.algorithms.label, p.targets.name): p.blocked for p in
               expand(parse_config(text))}
    assert blocked[("direct(layout=NCHWc)", "host")] is None
    assert "CPU schedules only" in blocked[("direct(layout=NCHWc)", "cuda")]
    assert "CPU schedules only" not in (blocked[("direct", "cuda")] or "")


def test_per_tensor_quantization_follows_the_layout() -> None:
    """int8 models quantize activations per tensor between convs: elementwise, so they
    stay in the layout (a per-channel one would not, and is reordered around)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 16, 8, 8), "float32"))
    w = relax.const(np.ones((16, 16, 3, 3), "float32"))
    scale, zero = relax.const(np.float32(0.5)), relax.const(np.int8(0))
    per_channel = relax.const(np.full((16,), 0.5, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv2d(x, w, padding=1))
            q = bb.emit(relax.op.quantize(a, scale, zero, axis=1, out_dtype="int8"))
            d = bb.emit(relax.op.dequantize(q, scale, zero, axis=1, out_dtype="float32"))
            b = bb.emit(relax.op.nn.conv2d(d, w, padding=1))
            q2 = bb.emit(relax.op.quantize(b, per_channel, relax.const(np.zeros(16, "int8")),
                                           axis=1, out_dtype="int8"))
            out = bb.emit_output(q2)
        bb.emit_func_output(out)
    report = convert_layout(bb.get(), DataLayout("NCHWc", 8), lambda spec, weight: None)[1]
    assert report.convs == 2
    assert dict(report.to_nchw) == {"quantize": 1}  # only the per-channel one
