"""Latency prediction for points never measured (Li, Paolieri and Golubchik, ICPE 2023):
per-layer learners trained on the workspace's per-layer profiles (`dlas.profile`), summed
with a rest term, with an interval from held-out models' errors.

* `features`: what the predictor sees of a layer and a point.
* `learners`: linear cost, gradient-boosted trees, and the FLOPs proxy.
* `predictor`: the fit, the sum, the interval, the out-of-range warnings.
* `sweep`: training points from stored profiles; a sweep's points from its models' shapes.
* `run`: `dlas predict CONFIG`.
"""
