"""A baseline peer's per-operator profile, by its runtime's own profiler.

TVM's layers are timed one kernel at a time (`dlas.profile.tvm_kernels`); a baseline's
kernels cannot be called on their own, so its runtime's profiler times them inside whole
inferences instead: ONNX Runtime's (`dlas.profile.ort_profile`) for an `OrtPeer`,
`torch.profiler` (`dlas.profile.torch_profile`) for a `TorchPeer`. Here a peer is sent
to its profiler with the settings it is timed with (its ONNX model, graph optimisation
level and thread pinning), so the profile is of the inference the peer runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dlas.profile.ort_profile import ort_profile_run
from dlas.profile.profiled_run import ProfiledRun
from dlas.profile.torch_profile import torch_profile_run


def peer_onnx(peer: Any) -> bytes | str:
    """The ONNX model an OrtPeer runs. The peer does not keep it, but its session does:
    onnxruntime's `InferenceSession` holds the bytes (or path) it was built from, to
    rebuild itself on a provider fallback."""
    session = peer.session
    data = getattr(session, "_model_bytes", None) or getattr(session, "_model_path", None)
    if not data:
        raise RuntimeError(f"{type(peer).__name__}'s session does not hold its ONNX model")
    return data


def _affinity_hook(cpus: list[int] | None, threads: int) -> Callable[[Any], None] | None:
    """Pin the profiling session's pool threads as OrtPeer pins its own."""
    if not cpus or len(cpus) != threads or threads <= 1:
        return None

    def hook(options: Any) -> None:
        options.add_session_config_entry("session.intra_op_thread_affinities",
                                         ";".join(str(c + 1) for c in cpus[1:]))
    return hook


def profile_peer(peer: Any, x: np.ndarray, *, threads: int, runs: int) -> ProfiledRun:
    """The per-operator profile of a baseline peer, by its runtime's profiler."""
    from dlas.tuning.baselines.ort import OrtPeer
    from dlas.tuning.baselines.torch_eager import TorchPeer

    if isinstance(peer, OrtPeer):
        return ort_profile_run(peer_onnx(peer), x, threads=threads, runs=runs,
                               graph_optimization=peer.graph_optimization,
                               session_options_hook=_affinity_hook(peer.cpus, threads))
    if isinstance(peer, TorchPeer):
        return torch_profile_run(peer.module, x, threads=threads, runs=runs)
    raise NotImplementedError(f"no operator profiler for baseline peer "
                              f"{type(peer).__name__} (runtime {peer.runtime!r}); known: "
                              "OrtPeer (onnxruntime), TorchPeer (pytorch)")
