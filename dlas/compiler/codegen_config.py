"""How dlas generates CPU code: without TVM's argument checks inside every kernel.

TVM's `MakePackedAPI` starts every PrimFunc with assertions on each buffer argument (its
type code, dtype, ndim, every dimension, strides, byte offset, device), each a branch to
an error message. For a model of 40-60 fused functions of 5-10 buffers each that is more
code than the kernels: LLVM spent 30-45% of an untuned compile on it (ResNet18-w0.5 fp32
NCHWc on Zen 1: 3.9 s -> 2.7 s per compile; MobileNetV2-w0.5 int8 NCHWc: 17.0 s -> 9.2 s,
the library 2.3 MB -> 1.0 MB), and each MetaSchedule candidate's build pays it too.

Those checks guard calls dlas never makes wrongly: a kernel is only called by the Relax
VM, with tensors whose static shapes Relax checked when it compiled the model, and the
VM still checks the model's own inputs at `main` (a wrong input shape or dtype is still a
clear error, `tests/test_compile.py`). `tirx.disable_assert` removes the assertions
and nothing else: the arithmetic, and so every output, is unchanged.
"""

from __future__ import annotations

import tvm

#: The PassContext config of every CPU build: a model's (`dlas.compiler.build`) and a
#: MetaSchedule candidate's (`dlas.tuning.metaschedule.build_worker`), so a tuned
#: candidate is timed as the model will run it.
CPU_CODEGEN_CONFIG = {"tirx.disable_assert": True}


def cpu_codegen_context(extra: dict | None = None) -> tvm.transform.PassContext:
    """The PassContext CPU code is built in (opt level 3, TVM's default), with a target's
    own options (`TargetSpec.pass_config`) beside dlas's."""
    return tvm.transform.PassContext(opt_level=3, config={**CPU_CODEGEN_CONFIG, **(extra or {})})
