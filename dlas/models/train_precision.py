"""The arithmetic training and fine-tuning run in: float32 (the paper's), or bfloat16
autocast where the CPU multiplies bfloat16 natively.

Why it is a choice: on a CPU with AVX512_BF16 (AMD Zen 4 and 5, Intel Cooper Lake and
newer; AMX on Sapphire Rapids) oneDNN runs a convolution's bf16 products in hardware, and
a training step of the quickstart's models (32x32 then) took 1.48x (ResNet18-w0.5) and 1.73x
(MobileNetV2-w0.5) less time than in float32 (Zen 4, 2026-11-29, channels-last, batch 64,
interleaved). Where the CPU lacks it (Zen 3, Zen 1), bf16 is emulated and slower, so
`auto` trains in float32 there. The weights stay float32 either way (autocast computes
in bf16 and keeps float32 masters), so everything after training sees a float32 model.

At small images it need not pay: on 16x16 digits (Zen 4) 4 epochs of MobileNetV2-w0.5
took 12.1-13.1 s in bf16 against 9.8-10.5 in float32 (its depthwise convs), while
ResNet18-w0.5 still gained (6.5-7.6 s against 8.7), so the quickstart trains in float32.

The paper trained in float32, and a model trained in bf16 is another model: the default
is float32, `auto` is asked for by name, and the resolved precision is part of the
train and compress stages' cache keys (`dlas.stages.train`), so a bf16-trained model is
never served where float32 was asked.
"""

from __future__ import annotations

from collections.abc import Iterable

from dlas.targets.host import cpuinfo_fields

#: What a sweep may ask for (`Budgets.train_precision`).
TRAIN_PRECISIONS = ("float32", "bfloat16", "auto")
#: /proc/cpuinfo flags of CPUs that multiply bfloat16 in hardware.
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
#: Lightning's name for each precision.
LIGHTNING_PRECISION = {"float32": "32-true", "bfloat16": "bf16-mixed"}


def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags, read by `dlas.targets.host.cpuinfo_fields` (the one reader
    of /proc/cpuinfo, which tests replace to force a CPU); empty where it has none."""
    return frozenset(cpuinfo_fields().get("flags", "").split())


def resolve(requested: str, flags: Iterable[str] | None = None) -> str:
    """The precision a fit runs in for `requested` ("auto": bfloat16 where `flags`, this
    CPU's by default, say it is native; float32 elsewhere)."""
    if requested not in TRAIN_PRECISIONS:
        raise ValueError(f"train_precision must be one of {TRAIN_PRECISIONS}, got {requested!r}")
    if requested != "auto":
        return requested
    have = cpu_flags() if flags is None else frozenset(flags)
    return "bfloat16" if have & NATIVE_BF16_FLAGS else "float32"
