"""Where the predictor's points come from.

* `training_points`: every TVM point of a workspace that has a stored per-layer profile
  (`dlas profile`): its conv and dense layers with their measured times, its latency.
* `sweep_points`: the TVM points of a sweep config, measured or not: the model is built
  (on PyTorch's meta device where it allows, so no memory and no compute) and its conv
  and linear layers are read with forward hooks. Nothing is trained, compressed or
  compiled, so a pruned model's density is its compression's nominal level (global
  pruning spreads it unevenly over layers: measured points know better, which is one
  reason a prediction has an interval).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dlas.predict.features import (
    PREDICTED_OPS,
    LayerFeatures,
    PointContext,
    PointFeatures,
    conv_layer,
    dense_layer,
)
from dlas.results.layer_profile import LayerTime, PointProfile


def precision_of(compression: str) -> str:
    """The dtype a compression option computes in, from its name."""
    name = compression.split("(")[0]
    if name.startswith("int8"):
        return "int8"
    if name.startswith("float16"):
        return "float16"
    return "float32"


def _context(algorithm: str, compression: str, tuning: str, threads: int | None,
             target: str) -> PointContext:
    return PointContext(algorithm=algorithm, dtype=precision_of(compression),
                        threads=threads or 1,
                        schedule="minimal" if tuning.split("(")[0] == "none" else "searched",
                        target=target)


def _profiled_layer(layer: LayerTime, context: PointContext) -> LayerFeatures | None:
    if layer.op not in PREDICTED_OPS:
        return None
    if layer.op == "dense":
        if not layer.out_shape or not layer.macs:
            return None
        out_features = int(np.prod(layer.out_shape))
        return dense_layer(in_features=layer.macs // max(out_features, 1),
                           out_features=out_features, density=1.0, context=context)
    if not (layer.weight_shape and layer.data_shape and layer.out_shape and layer.strides):
        return None  # a conv without its spec (TVM's own lowering): part of the rest
    o, cin_g, kh, _ = layer.weight_shape
    weights = o * cin_g * kh * layer.weight_shape[3]
    density = layer.nnz / weights if layer.nnz is not None and weights else 1.0
    return conv_layer(in_channels=layer.data_shape[1], out_channels=o, kernel=kh,
                      stride=layer.strides[0], groups=layer.groups or 1,
                      out_h=layer.out_shape[2], out_w=layer.out_shape[3], density=density,
                      context=context, index=layer.conv_index)


def point_from_profile(profile: PointProfile, *, label: str, model: str, algorithm: str,
                       compression: str, tuning: str, target: str) -> PointFeatures:
    """A measured TVM point as training data."""
    context = _context(algorithm, compression, tuning, profile.threads, target)
    layers, us = [], []
    activations = 0.0
    for layer in profile.layers:
        features = _profiled_layer(layer, context)
        if features is None:
            continue
        layers.append(features)
        us.append(layer.time_us * layer.calls)
        if features.op != "dense":
            activations += features.out_channels * features.out_h * features.out_w
    return PointFeatures(label, model, context, layers, activations,
                         latency_us=profile.latency_median_ms * 1e3, layer_us=us)


def training_points(db_path: Path) -> list[PointFeatures]:
    """Every profiled TVM point of a workspace's results database."""
    from dlas.results.profiles import load_profile
    from dlas.results.store import ResultStore

    out = []
    with ResultStore(db_path) as store:
        for row in store.rows(status="ok"):
            if row.tuning in ("onnxruntime", "pytorch") or not row.timing_key:
                continue
            stored = load_profile(store.conn, row.point_key, row.timing_key)
            if stored is None or stored[0].runtime != "tvm":
                continue
            out.append(point_from_profile(
                stored[0], label=" / ".join((row.model, row.compression, row.algorithm,
                                             row.tuning)),
                model=row.model, algorithm=row.algorithm, compression=row.compression,
                tuning=row.tuning, target=row.target or "host"))
    return out


def _model_layers(point: Any, context: PointContext, density: float
                  ) -> tuple[list[LayerFeatures], float]:
    """The conv and linear layers of a point's model, from forward hooks on a model
    built on the meta device (or the CPU where the option cannot build on meta)."""
    import torch
    from torch import nn

    from dlas.estimate.work import dataset_input

    shape, classes = dataset_input(point)
    option = point.models.option
    layers: list[LayerFeatures] = []
    activations = [0.0]

    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        if isinstance(module, nn.Conv2d):
            _, _, oh, ow = out.shape
            layers.append(conv_layer(
                in_channels=module.in_channels, out_channels=module.out_channels,
                kernel=module.kernel_size[0], stride=module.stride[0], groups=module.groups,
                out_h=int(oh), out_w=int(ow), density=density, context=context,
                index=sum(la.op != "dense" for la in layers)))
            activations[0] += module.out_channels * int(oh) * int(ow)
        elif isinstance(module, nn.Linear):
            layers.append(dense_layer(in_features=module.in_features,
                                      out_features=module.out_features, density=1.0,
                                      context=context))

    last: Exception | None = None
    for device in ("meta", "cpu"):
        layers.clear()
        activations[0] = 0.0
        try:
            with torch.device(device):
                model = option.fn(point.models.params, num_classes=classes, input_shape=shape)
                handles = [m.register_forward_hook(hook) for m in model.modules()
                           if isinstance(m, nn.Conv2d | nn.Linear)]
                with torch.no_grad():
                    model.eval()(torch.zeros((1, *shape)))
            for h in handles:
                h.remove()
            return layers, activations[0]
        except Exception as exc:  # noqa: BLE001 - e.g. weights loaded onto meta: try cpu
            last = exc
    raise RuntimeError(f"cannot build {point.models.label} to read its layers: {last}")


def nominal_density(point: Any) -> float:
    """A compression's share of weights left, from its parameters (1 when it zeroes
    none). A pruning whose level is chosen after training (the elbow of `levels`) is
    assumed to reach the highest of its levels: the accuracy rule usually stops earlier,
    so a prediction for it leans fast."""
    if "sparse" not in point.compression.tags:
        return 1.0
    params = point.compression.params
    for name in ("level", "sparsity"):
        value = getattr(params, name, None)
        if isinstance(value, int | float):
            return max(0.0, 1.0 - float(value))
    levels = getattr(params, "levels", None) or []
    return max(0.0, 1.0 - max(levels)) if levels else 1.0


def sweep_points(config: Any) -> list[tuple[Any, PointFeatures | None, str | None]]:
    """(point, its features, why it has none) for every point of a sweep config."""
    from dlas.sweep.grid import expand
    from dlas.targets.resolve import resolve_target

    out: list[tuple[Any, PointFeatures | None, str | None]] = []
    for point in expand(config):
        if point.blocked:
            out.append((point, None, "not runnable"))
            continue
        if point.is_baseline:
            out.append((point, None, "a baseline runtime: the predictor models TVM points"))
            continue
        target = resolve_target(point)
        context = _context(point.algorithms.label, point.compression.label,
                           point.tuning.label, target.num_threads or _cores(),
                           point.targets.label)
        if context.sparse and nominal_density(point) >= 1.0:
            out.append((point, None, "CSR without zero weights"))
            continue
        layers, activations = _model_layers(point, context, nominal_density(point))
        label = " / ".join((point.models.label, point.compression.label,
                            point.algorithms.label, point.tuning.label))
        out.append((point, PointFeatures(label, point.models.label, context, layers,
                                         activations), None))
    return out


def _cores() -> int:
    from dlas.targets.host import available_cores

    return available_cores()
