"""Which compiled kernel computes which layer of the model (TVM points).

A compiled library keeps its kernels' symbols but not what they came from: the conv
blocks' tags (`dlas.tir.conv_spec`) are gone after code generation. So the profile
lowers the imported model again with the point's algorithm (steps 1-4 of
`dlas.compiler.build`: the same function, the same inputs, so the same kernels under the
same names; a fraction of a second for the CIFAR models) and reads, per kernel, the
conv specs its blocks carry, and, per conv of the model in order, the algorithm that
lowered it and its weight's non-zeros (`ConvLegalizer.layers`). The kernels a profile
times are checked against this manifest's call order (`map_calls`): a library that does
not match the lowering is an error, not a wrong attribution.

How a kernel call finds its layer: fusion puts at most one conv in a kernel, and each
algorithm-made conv block carries its spec; the call takes the model's first conv not
yet taken with that spec (`_take_conv`). Order alone is not enough: fusion may order a
block's branches differently from the model (measured: ResNet18's shortcut conv ran
before the 3x3 conv beside it, and by order each got the other's time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import relax, s_tir, tirx
from tvm_ffi import structural_equal

from dlas.algorithms.spmm_kernel import BUILT_ATTR
from dlas.compiler.build import DEFAULT_LOWERING, ConvLowering, lower_to_tir, make_target
from dlas.tir.conv_spec import CONV_ALGORITHM_ATTR, CONV_SPEC_ATTR, ConvSpec
from dlas.tir.schedule_helpers import const_extent, root_block

#: Substrings of a kernel's symbol that say what it computes, for non-conv kernels (the
#: symbol is made of the fused ops' names: `fused_matmul_add25`, `max_pool2d`, ...).
_OP_WORDS = (
    ("dense", ("matmul", "dense")),
    ("pool", ("pool", "mean")),
    ("layout", ("reshape", "transpose", "layout_transform", "flatten", "squeeze",
                "concatenate", "split", "strided_slice", "permute", "reorder")),
    ("elementwise", ("add", "relu", "multiply", "subtract", "divide", "clip", "sigmoid",
                     "tanh", "exp", "cast", "quantize", "minimum", "maximum", "sqrt",
                     "softmax")),
)


@dataclass
class KernelInfo:
    """What one kernel (PrimFunc) of the library computes."""

    symbol: str
    #: Conv specs its blocks are tagged with (algorithm-made convs), and their algorithms.
    specs: list[ConvSpec] = field(default_factory=list)
    algorithms: list[str] = field(default_factory=list)
    #: It holds a conv (tagged, or TVM's own lowering of one).
    has_conv: bool = False
    #: A loop's extent is read from memory (CSR; the pixel-tile sparse kernel's loop over a
    #: row's entries sits inside its block, whose `dlas.spmm` annotation says so): TVM's
    #: FLOP estimate cannot count it, and the kernel computes the weight's non-zeros only.
    dynamic: bool = False
    #: TVM's FLOP estimate of one call (non-conv kernels; None when it has none).
    flops: float | None = None
    #: "minimal", "searched" or "transferred" (`dlas.results.layer_profile.LayerTime.schedule`).
    schedule: str = "minimal"

    @property
    def op(self) -> str:
        if self.has_conv:
            return "depthwise_conv2d" if any(s.is_depthwise for s in self.specs) else "conv2d"
        name = self.symbol.lower()
        for op, words in _OP_WORDS:
            if any(w in name for w in words):
                return op
        return "other"


@dataclass
class KernelManifest:
    """The kernels of one compiled point and the model's convs."""

    functions: dict[str, KernelInfo]
    #: Kernel symbols in the order the model calls them.
    calls: list[str]
    #: The model's convs in order (`ConvLegalizer.layers`).
    convs: list[ConvLowering]

    def map_calls(self, observed: list[str]) -> list[tuple[KernelInfo, ConvLowering | None]]:
        """Each observed kernel call with its kernel and, for conv kernels, the model's
        conv it computes. The VM skips kernels the finalize pipeline turned into views
        (a `reshape` becomes a view of its input); only layout kernels may be skipped.
        Raises ValueError when the calls are not the manifest's."""
        out: list[tuple[KernelInfo, ConvLowering | None]] = []
        pending = list(self.convs)
        seen = iter(observed)
        want = next(seen, None)
        for position, symbol in enumerate(self.calls):
            info = self.functions[symbol]
            conv = _take_conv(pending, info) if info.has_conv else None
            if symbol == want:
                out.append((info, conv))
                want = next(seen, None)
            elif info.op != "layout":
                raise ValueError(
                    f"the library's kernel calls do not match its model's lowering: call "
                    f"{position} of the lowering, {symbol}, was not made (the library made "
                    f"{want or 'no more calls'} there). Was it compiled by another version "
                    "of dlas? Re-run the sweep to recompile it")
        if want is not None:
            raise ValueError(f"the library called {want}, which its model's lowering does "
                             "not call there; re-run the sweep to recompile it")
        return out


def _take_conv(pending: list[ConvLowering], info: KernelInfo) -> ConvLowering:
    """The model's conv a conv kernel call computes, removed from `pending`: the first
    one with the kernel's spec (or, for TVM's own lowering, which has no tag, the first
    one it lowered). Not simply the next one: fusion may order a block's branches
    differently from the model (ResNet's shortcut conv comes before the conv beside it)."""
    spec = info.specs[0] if info.specs else None
    for i, conv in enumerate(pending):
        if (conv.spec == spec) if spec is not None else conv.algorithm == DEFAULT_LOWERING:
            return pending.pop(i)
    raise ValueError(f"kernel {info.symbol} computes a conv the model's lowering does not "
                     "have; re-run the sweep to recompile it")


def _blocks(func: tirx.PrimFunc) -> tuple[s_tir.Schedule, list[Any]]:
    """The function's schedule and every block of it, nested ones (CSR updates) included."""
    sch = s_tir.Schedule(func)
    blocks, frontier = [], [root_block(sch)]
    while frontier:
        children = list(sch.get_child_blocks(frontier.pop()))
        blocks += children
        frontier += children
    return sch, blocks


def _kernel_info(symbol: str, func: tirx.PrimFunc) -> KernelInfo:
    from tvm.s_tir.analysis import estimate_tir_flops

    info = KernelInfo(symbol)
    sch, blocks = _blocks(func)
    for rv in blocks:
        ann = sch.get(rv).annotations
        if CONV_SPEC_ATTR in ann:
            info.specs.append(ConvSpec.from_json(str(ann[CONV_SPEC_ATTR])))
            info.algorithms.append(str(ann.get(CONV_ALGORITHM_ATTR, "")))
    info.has_conv = bool(info.specs) or "conv2d" in symbol
    info.dynamic = (any(const_extent(sch, loop) is None
                        for rv in blocks for loop in sch.get_loops(rv))
                    or any(BUILT_ATTR in sch.get(rv).annotations for rv in blocks))
    if not info.has_conv and not info.dynamic:
        try:
            info.flops = float(estimate_tir_flops(tvm.IRModule({"main": func})))
        except Exception:  # noqa: BLE001 - no estimate for this kernel: left unknown
            info.flops = None
    return info


def _call_order(mod: tvm.IRModule) -> list[str]:
    """Kernel symbols in the order main calls them (`call_tir` sites)."""
    call_tir = tvm.ir.Op.get("relax.call_tir")
    order: list[str] = []

    @relax.expr_functor.visitor
    class CallOrder(relax.PyExprVisitor):
        def visit_call_(self, call: relax.Call) -> None:  # noqa: N802 - TVM's visitor name
            super().visit_call_(call)  # arguments first: they are computed before the call
            if call.op.same_as(call_tir):
                order.append(call.args[0].name_hint)

    CallOrder().visit_expr(mod["main"])
    return order


def schedule_sources(mod: tvm.IRModule, tuning: dict[str, Any] | None) -> dict[str, str]:
    """Kernel symbol -> where its schedule came from, from the compile's tuning summary.
    A task report names one kernel; kernels structurally equal to it (MetaSchedule tunes
    them as one task) share its source."""
    if not tuning:
        return {}
    funcs = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    out: dict[str, str] = {}
    for task in tuning.get("per_task", []):
        source = str(task.get("source") or "")
        kind = ("searched" if source == "searched" else
                "transferred" if source.startswith("transferred") else "minimal")
        if task.get("outcome") == "untuned":
            kind = "minimal"
        name = str(task.get("task"))
        out[name] = kind
        base = funcs.get(name)
        if base is None:
            continue
        plain = base.without_attr("global_symbol")
        for other, func in funcs.items():
            if other not in out and structural_equal(func.without_attr("global_symbol"), plain):
                out[other] = kind
    return out


def kernel_manifest(imported: Any, algorithm: Any, tvm_target: dict[str, Any],
                    tuning: dict[str, Any] | None) -> KernelManifest:
    """The manifest of the point compiled from `imported` (an `ImportedModel`) with
    `algorithm` for `tvm_target`; `tuning` is its compile facts' tuning summary."""
    mod, legalizer = lower_to_tir(imported.mod, imported.params, algorithm,
                                  make_target(tvm_target))
    sources = schedule_sources(mod, tuning)
    functions = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            info = _kernel_info(gvar.name_hint, func)
            info.schedule = sources.get(gvar.name_hint, "minimal")
            functions[gvar.name_hint] = info
    return KernelManifest(functions, _call_order(mod), list(legalizer.layers))


def conv_algorithm(info: KernelInfo, conv: ConvLowering | None) -> str | None:
    """The algorithm that computed a conv kernel's conv."""
    if conv is not None:
        return conv.algorithm
    if info.algorithms:
        return info.algorithms[0]
    return DEFAULT_LOWERING if info.has_conv else None
