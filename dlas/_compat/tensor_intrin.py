"""Register only the tensor intrinsics a target can use, not all of TVM's.

`tvm.s_tir.tensor_intrin`'s package import registers every intrinsic TVM has (CUDA MMA
and WMMA, ROCm, Hexagon, RISC-V, Arm, x86) by parsing hundreds of TVMScript functions,
each through `inspect.stack()`, whose cost grows with the modules loaded: with torch in
the process it took 100-180 s on these 2-core machines, 135 s of it CUDA's. MetaSchedule
imports the package in every `TuneContext`, so the first tuned task of every dlas process
paid it (profiled: 184 of a 206 s tuning of one 4-trial task).

`register_for(target)` installs the package module without running its `__init__` and
imports only the target's own intrinsic modules (x86 for x86 CPUs: VNNI and AVX-512 dot
products; arm_cpu for aarch64; cuda for CUDA). MetaSchedule's later
`import tvm.s_tir.tensor_intrin` then finds it in `sys.modules`; any other submodule can
still be imported by name.

CUDA's own module still parses 366 functions, and each `inspect.stack()` looks up the
source file of every frame on the stack; frames without a file on disk (the import
machinery's) send `inspect.getmodule` through every loaded module. In a test process
(pytest's deep stacks, torch and Lightning loaded) that took 82-125 s, in a plain
script about one. The parser reads only the frames themselves, the first three frames'
source lines and their line numbers (`tvm.script.parser.core.utils`), so during the
import `inspect.stack` gives exactly that (`_parser_stack`): 1-2 s.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import sys
import types
from collections.abc import Iterator

PACKAGE = "tvm.s_tir.tensor_intrin"


def modules_for(kind: str, arch: str) -> list[str]:
    """The intrinsic modules a target of this kind and CPU architecture can use."""
    if kind == "cuda":
        return ["cuda"]
    if arch.startswith(("aarch64", "arm")):
        return ["arm_cpu"]
    return ["x86"]


def register_for(target: object) -> list[str]:
    """Register the intrinsics `target` (a tvm.target.Target) can use; the modules now
    imported. Does nothing when TVM's package was imported whole already."""
    import platform

    def triple_arch(t: object) -> str:
        try:
            triple = str(t.attrs.get("mtriple", "") or "")  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - no attrs to read: this machine's architecture
            triple = ""
        return triple.split("-")[0] if triple else platform.machine()

    kind = str(getattr(getattr(target, "kind", None), "name", "llvm"))
    wanted = modules_for(kind, triple_arch(target))
    host = getattr(target, "host", None)
    if kind == "cuda" and host is not None:
        wanted += modules_for("llvm", triple_arch(host))
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            return []
        package = types.ModuleType(PACKAGE)
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = PACKAGE
        package.__spec__ = spec
        sys.modules[PACKAGE] = package
        import tvm.s_tir

        tvm.s_tir.tensor_intrin = package  # type: ignore[attr-defined]
    with _parser_stack():
        for name in wanted:
            importlib.import_module(f"{PACKAGE}.{name}")
    return wanted


#: Frames of `inspect.stack()` given source context: TVMScript's parser reads the line of
#: `stack()[2]` (whether the function is defined in a decorated class) and nothing deeper.
CONTEXT_FRAMES = 3


@contextlib.contextmanager
def _parser_stack() -> Iterator[None]:
    """`inspect.stack` as TVMScript's parser uses it, without the per-frame source lookup
    (see the module doc): every frame, the first `CONTEXT_FRAMES` with their source line,
    the rest with file, line and function only."""
    original = inspect.stack

    def stack(context: int = 1) -> list[inspect.FrameInfo]:
        frames: list[inspect.FrameInfo] = []
        frame = sys._getframe(1)
        while frame is not None:
            if len(frames) < CONTEXT_FRAMES:
                info = inspect.getframeinfo(frame, context)
                frames.append(inspect.FrameInfo(frame, *info, positions=info.positions))
            else:
                code = frame.f_code
                frames.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno,
                                                code.co_name, None, None))
            frame = frame.f_back
        return frames

    inspect.stack = stack  # type: ignore[assignment]
    try:
        yield
    finally:
        inspect.stack = original  # type: ignore[assignment]
