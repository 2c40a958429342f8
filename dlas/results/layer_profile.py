"""The records of a per-layer profile: one `LayerTime` per kernel call (TVM) or operator
(baselines), and a `PointProfile` per measured point.

Why pydantic: the profile is stored as JSON in SQLite (`dlas.results.store`, table
`layer_profiles`) and printed by `dlas profile --json`; one model defines both.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: Kinds of layer, from what the kernel computes (`op`).
OPS = ("conv2d", "depthwise_conv2d", "dense", "pool", "elementwise", "layout", "other")


class LayerTime(BaseModel):
    """One layer of a point: what it computes, how much work that is, and its time."""

    model_config = ConfigDict(extra="ignore")

    #: Position in the model's execution order (0-based).
    index: int
    #: The kernel's symbol (TVM), or the runtime's node or operator name (baselines).
    name: str
    #: One of `OPS`.
    op: str
    #: Index among the model's convolutions (import order), for conv layers.
    conv_index: int | None = None
    data_shape: list[int] | None = None
    weight_shape: list[int] | None = None
    out_shape: list[int] | None = None
    strides: list[int] | None = None
    padding: list[int] | None = None
    groups: int | None = None
    dtype: str | None = None
    #: A conv's activation layout (its output's: NCHW, NHWC, NCHW16c, ...), layer 4's
    #: data format; NCHWc shapes count the padded channels the kernel computes.
    layout: str | None = None
    #: The conv algorithm that computed it ("tvm-default": TVM's own lowering, where the
    #: chosen algorithm could not); None for non-conv layers and baselines.
    algorithm: str | None = None
    #: Where its schedule came from: "minimal" (the algorithm's hand-written one),
    #: "searched" (MetaSchedule found it for this workload), "transferred" (another
    #: workload's schedule replayed here); None for baselines.
    schedule: str | None = None
    #: Multiply-accumulates of the dense layer (convs and dense layers).
    macs: int | None = None
    #: Non-zero weights (convs and dense layers, when the weights are known).
    nnz: int | None = None
    #: Floating-point (or integer) operations the kernel executes: 2 x MACs for a dense
    #: algorithm, 2 x non-zeros x output pixels for a sparse one.
    flops: float | None = None
    #: Minimum bytes moved: every input read once, every output written once.
    bytes: int | None = None
    #: Times the model calls this kernel per inference (1 unless the runtime merges).
    calls: int = 1
    #: Median microseconds per call, and its 95% CI over rounds, as the layer costs inside
    #: the model: a TVM kernel timed in the model's sequence; a baseline's operator as its
    #: profiler timed it, scaled to the unprofiled latency (`PointProfile.time_scale`).
    time_us: float
    ci_us: list[float] | None = None
    #: TVM: the kernel timed alone (`time_evaluator`, its inputs and weights warm in
    #: cache), microseconds per call.
    alone_us: float | None = None
    #: Share of the point's summed layer time.
    share: float | None = None
    #: flops / bytes.
    intensity: float | None = None
    #: FLOP/s this layer achieved, in GFLOP/s.
    gflops: float | None = None
    #: The roof that bounds it (`dlas.profile.roofline`): GFLOP/s attainable at its
    #: intensity, from the memory level its bytes fit in, and which bound it is.
    roof_gflops: float | None = None
    roof_level: str | None = None
    bound: str | None = None
    #: gflops / roof_gflops.
    roof_fraction: float | None = None


class PointProfile(BaseModel):
    """The profile of one measured point."""

    model_config = ConfigDict(extra="ignore")

    #: The measure (TVM) or baseline entry's key the profile belongs to.
    key: str
    #: "tvm", or the baseline runtime's name.
    runtime: str
    label: str
    threads: int | None = None
    #: Placement the layer times were taken in (`dlas.measure.placement`).
    placement: str = "unknown"
    #: The whole model timed in the same rounds as its layers, ms (median, 95% CI).
    latency_median_ms: float
    latency_ci_ms: list[float] | None = None
    #: Sum over the layers of time_us x calls, ms; and what it leaves out of the whole
    #: model's time (the runtime's dispatch, allocation, copies), as a share of it.
    layers_sum_ms: float
    unaccounted: float
    #: Microseconds per inference in no layer, measured on its own: TVM, the latency
    #: less the kernel calls replayed back to back (the VM's own work between kernels);
    #: a baseline, the part of its profiled inference between operators (the executor's
    #: own work), scaled as its layers are. Layers plus outside give the latency back
    #: (`accounted`); None in profiles stored before it existed.
    outside_us: float | None = None
    #: A baseline: latency / the inference as its profiler saw it. The profiler slows
    #: what it times; its layer and outside times are scaled by this so that they are
    #: shares of the unprofiled inference. 1 for TVM (nothing profiled it).
    time_scale: float = 1.0
    #: TVM: the model's kernel calls replayed back to back, ms (`ReplaySubject` in
    #: `dlas.profile.tvm_kernels`): layers_sum_ms / replay_ms is how well kernels timed
    #: alone add up; latency - replay is the VM's own work between kernels.
    replay_ms: float | None = None
    #: How the layer times were obtained (`dlas.profile.tvm_kernels.TVM_METHOD`, "onnxruntime
    #: profiler", "torch.profiler").
    method: str
    rounds: int = 0
    seconds: float = 0.0
    notes: list[str] = Field(default_factory=list)
    layers: list[LayerTime]

    @property
    def accounted(self) -> float | None:
        """(layers + outside) / latency: 1 when they add up to the model's time."""
        if self.outside_us is None or self.latency_median_ms <= 0:
            return None
        return (self.layers_sum_ms + self.outside_us / 1e3) / self.latency_median_ms
