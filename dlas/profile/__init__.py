"""Where the time goes: per-layer profiles of measured points, the machine's measured
limits (peak FLOP/s, bandwidth per memory level) and the roofline that relates them.

The records are results (`dlas.results.layer_profile`: `LayerTime`, `PointProfile`);
profiling a sweep's points in the timing worker, and printing them, is the runner's
(`dlas.runner.profiling`, `dlas.runner.profile_worker`, `dlas.runner.profile_console`).
This package is the library they call, and imports neither.

* `kernels`: which compiled kernel computes which layer of the model (TVM points).
* `tvm_kernels`: each kernel of a compiled library timed in the model's sequence and
  alone, through the product's sampler (`dlas.measure.rounds`), beside the whole model
  in the same rounds.
* `peer_profile`: a baseline's layers by its runtime's own profiler: `ort_profile`
  (ONNX Runtime's), `torch_profile` (`torch.profiler`), both giving a `ProfiledRun`
  (`profiled_run`) whose conv and dense layers carry the model's work (`work`).
* `limits`: the machine's limits, measured once per target and cached; the kernels that
  measure them (`limit_kernels`), the CPU table of theoretical peaks (`cpu_table`) and
  what they read of the host (`host_facts`).
* `roofline`: each layer's arithmetic intensity, attainable roof and fraction of it.
"""
