"""Where the time goes: per-layer profiles of measured points, the machine's measured
limits (peak FLOP/s, bandwidth per memory level) and the roofline that relates them.

* `layers`: the typed records (`LayerTime`, `PointProfile`).
* `kernels`: which compiled kernel computes which layer of the model (TVM points).
* `tvm_kernels`: each kernel of a compiled library timed on its own, through the
  product's sampler (`dlas.measure.rounds`), beside the whole model in the same rounds.
* `operators`: the baselines' own profilers (ONNX Runtime's, `torch.profiler`).
* `limits`: the machine's limits, measured once per target and cached.
* `roofline`: each layer's arithmetic intensity, attainable roof and fraction of it.
"""
