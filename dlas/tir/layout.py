"""Activation data layouts (layer 4's "data formats"): NCHW, NHWC and channel-blocked NCHWc.

A layout says where the element (n, c, h, w) of a logical NCHW activation lives:

* `NCHW` (the paper's): `[n, c, h, w]`.
* `NHWC`: `[n, h, w, c]`, channels innermost, so a pixel's channels are contiguous.
* `NCHW{b}c`: `[n, c // b, h, w, c % b]`, channels in blocks of `b` innermost (oneDNN's
  nChw16c, ONNX Runtime's MLAS NCHWc). `b` is the target's SIMD width in elements, so one
  block of output channels is one vector register. Channels that are not a multiple of
  `b` are padded up to one (`physical_channels`); the padded lanes hold values no real
  output reads (convolution weights for them are zero, reorders back to NCHW drop them).

The compiler keeps a model's activations in one layout across the graph
(`dlas.compiler.layout`), and the algorithms compute convolutions on it
(`dlas.algorithms`): both read this module, so it lives below them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tvm import tirx

#: The layout kinds an algorithm's `layout` parameter takes.
LAYOUT_KINDS = ("NCHW", "NHWC", "NCHWc")

_BLOCKED = re.compile(r"^NCHW(\d+)c$")


@dataclass(frozen=True)
class DataLayout:
    """One activation layout; `block` is the channel block of NCHWc (0 otherwise)."""

    kind: str
    block: int = 0

    def __post_init__(self) -> None:
        if self.kind not in LAYOUT_KINDS:
            raise ValueError(f"layout must be one of {LAYOUT_KINDS}, got {self.kind!r}")
        if (self.kind == "NCHWc") != (self.block > 0):
            raise ValueError(f"NCHWc needs a channel block > 0 (and only NCHWc has one): "
                             f"{self.kind} block {self.block}")

    @classmethod
    def parse(cls, name: str) -> DataLayout:
        """"NCHW", "NHWC" or "NCHW16c" (a relax op's layout string)."""
        if name in ("NCHW", "NHWC"):
            return cls(name)
        match = _BLOCKED.match(name)
        if match is None:
            raise ValueError(f"not an activation layout dlas knows: {name!r} "
                             f"(NCHW, NHWC or NCHW<b>c)")
        return cls("NCHWc", int(match.group(1)))

    @property
    def name(self) -> str:
        """The relax layout string: NCHW, NHWC or NCHW<b>c."""
        return f"NCHW{self.block}c" if self.kind == "NCHWc" else self.kind

    @property
    def is_nchw(self) -> bool:
        return self.kind == "NCHW"

    def physical_channels(self, channels: int) -> int:
        """Channels stored: padded up to a whole block in NCHWc."""
        if self.kind != "NCHWc":
            return channels
        return -(-channels // self.block) * self.block

    def shape(self, nchw: Sequence[int]) -> tuple[int, ...]:
        """The stored shape of a logical (N, C, H, W) tensor."""
        n, c, h, w = (int(v) for v in nchw)
        if self.kind == "NHWC":
            return n, h, w, c
        if self.kind == "NCHWc":
            return n, self.physical_channels(c) // self.block, h, w, self.block
        return n, c, h, w

    def logical_shape(self, stored: Sequence[int]) -> tuple[int, int, int, int]:
        """(N, C, H, W) of a stored tensor (C includes NCHWc's padding)."""
        dims = tuple(int(v) for v in stored)
        if self.kind == "NHWC":
            n, h, w, c = dims
            return n, c, h, w
        if self.kind == "NCHWc":
            n, cb, h, w, b = dims
            return n, cb * b, h, w
        n, c, h, w = dims
        return n, c, h, w

    @property
    def spatial_axes(self) -> tuple[int, int]:
        """The stored axes of H and W."""
        return (1, 2) if self.kind == "NHWC" else (2, 3)

    def index(self, n: tirx.Expr, c: tirx.Expr, h: tirx.Expr,
              w: tirx.Expr) -> tuple[tirx.Expr, ...]:
        """Stored indices of logical element (n, c, h, w)."""
        if self.kind == "NHWC":
            return n, h, w, c
        if self.kind == "NCHWc":
            return n, c // self.block, h, w, c % self.block
        return n, c, h, w

    def chunk_index(self, n: tirx.Expr, chunk: tirx.Expr, lane: tirx.Expr,
                    h: tirx.Expr, w: tirx.Expr) -> tuple[tirx.Expr, ...]:
        """Stored indices of channel `chunk * chunk_size + lane` (see `chunk_size`), written
        without a division so a kernel's reduction over (chunk, lane) indexes directly."""
        if self.kind == "NHWC":
            return n, h, w, lane  # one chunk holding every channel
        if self.kind == "NCHWc":
            return n, chunk, h, w, lane
        return n, chunk, h, w  # chunks of one channel

    def chunk_size(self, channels: int) -> int:
        """Channels per innermost run: a block (NCHWc), all of them (NHWC), one (NCHW)."""
        if self.kind == "NHWC":
            return channels
        if self.kind == "NCHWc":
            return self.block
        return 1

    def constant(self, value: np.ndarray, channels: int, pad_value: float = 0.0) -> np.ndarray:
        """A constant operand of an elementwise op with an NCHW activation, stored in this
        layout: `value` broadcasts against (N, C, H, W) (a per-channel (1, C, 1, 1) bias,
        a scalar, a full tensor). Size-1 axes stay size 1, so it still broadcasts. NCHWc's
        padded channels get `pad_value` (1 for a divisor, so no lane divides by zero)."""
        if value.ndim == 0:
            return value
        full = np.reshape(value, (1,) * (4 - value.ndim) + value.shape)
        if self.kind == "NHWC":
            return np.ascontiguousarray(full.transpose(0, 2, 3, 1))
        if self.kind == "NCHW":
            return full
        n, c, h, w = full.shape
        if c == 1:  # broadcast over channels: a size-1 block axis
            return np.ascontiguousarray(full.reshape(n, 1, h, w, 1))
        padded_c = self.physical_channels(channels)
        padded = np.full((n, padded_c, h, w), pad_value, dtype=full.dtype)
        padded[:, :c] = full
        blocks = padded.reshape(n, padded_c // self.block, self.block, h, w)
        return np.ascontiguousarray(blocks.transpose(0, 1, 3, 4, 2))

    def from_nchw(self, array: np.ndarray) -> np.ndarray:
        """A full NCHW array stored in this layout (tests and reference checks)."""
        return self.constant(array, array.shape[1])

    def to_nchw(self, array: np.ndarray, channels: int) -> np.ndarray:
        """A stored array back in NCHW, padding dropped (tests and reference checks)."""
        if self.kind == "NHWC":
            return np.ascontiguousarray(array.transpose(0, 3, 1, 2))
        if self.kind == "NCHW":
            return array
        n, cb, h, w, b = array.shape
        full = array.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)
        return np.ascontiguousarray(full[:, :channels])


NCHW = DataLayout("NCHW")
