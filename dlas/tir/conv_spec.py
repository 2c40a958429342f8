"""`ConvSpec` and the block annotations that mark a TIR block as an algorithm-made conv.

The compiler lowers every `relax.nn.conv2d` with an algorithm's TE compute, then fusion
merges it with its epilogue; afterwards only the block itself can say that it is a conv,
with which shapes and made by which algorithm. `tag_conv_block` writes that onto the
block, `conv_spec_of` reads it back: the minimal schedule, the GPU schedule and tuning
find convs this way without outside bookkeeping.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from tvm import s_tir

from .layout import DataLayout
from .schedule_helpers import root_block

#: Block annotation the compiler puts on the output block of every algorithm-made conv.
#: Its value is the `ConvSpec` as JSON, so any (fused) PrimFunc says which of its blocks
#: is a convolution, and with which shapes, without outside bookkeeping.
CONV_SPEC_ATTR = "dlas.conv_spec"
#: Block annotation with the name of the algorithm that made the block.
CONV_ALGORITHM_ATTR = "dlas.conv_algorithm"
#: Block annotation a conv schedule puts on a block whose output it computes in register
#: tiles: once every consumer (the fused epilogue) is computed at the tile loop the
#: schedule returned, the compiler gives the block's output buffer the "local" scope, so
#: the tile stays in registers from the first FMA to the epilogue's store.
REGISTER_TILE_ATTR = "dlas.register_tile"


@dataclass(frozen=True)
class ConvSpec:
    """One `relax.nn.conv2d` call: static shapes, the OIHW weight, and the data layouts.

    Shapes are logical: `data_shape` is (N, C, H, W) whatever layout the data is stored
    in (`data_layout`, `out_layout`: "NCHW", "NHWC" or "NCHW<b>c", see `dlas.tir.layout`);
    in NCHWc, C and O count the padded channels the graph carries. Padding is (top, left,
    bottom, right), as relax stores it.
    """

    data_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    strides: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    data_dtype: str
    weight_dtype: str
    out_dtype: str
    data_layout: str = "NCHW"
    out_layout: str = "NCHW"

    @property
    def data_layout_(self) -> DataLayout:
        return DataLayout.parse(self.data_layout)

    @property
    def out_layout_(self) -> DataLayout:
        return DataLayout.parse(self.out_layout)

    @property
    def is_nchw(self) -> bool:
        """Both sides in the paper's layout."""
        return self.data_layout == "NCHW" and self.out_layout == "NCHW"

    @property
    def stored_data_shape(self) -> tuple[int, ...]:
        return self.data_layout_.shape(self.data_shape)

    @property
    def stored_out_shape(self) -> tuple[int, ...]:
        return self.out_layout_.shape(self.out_shape)

    @property
    def batch(self) -> int:
        return self.data_shape[0]

    @property
    def in_channels(self) -> int:
        return self.data_shape[1]

    @property
    def out_channels(self) -> int:
        return self.weight_shape[0]

    @property
    def kernel_size(self) -> tuple[int, int]:
        return self.weight_shape[2], self.weight_shape[3]

    @property
    def is_depthwise(self) -> bool:
        """One input channel per group (MobileNet-style), any channel multiplier."""
        return self.groups > 1 and self.groups == self.in_channels

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        _, _, h, w = self.data_shape
        kh, kw = self.kernel_size
        pt, pl, pb, pr = self.padding
        oh = (h + pt + pb - (kh - 1) * self.dilation[0] - 1) // self.strides[0] + 1
        ow = (w + pl + pr - (kw - 1) * self.dilation[1] - 1) // self.strides[1] + 1
        return self.batch, self.out_channels, oh, ow

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the dense convolution (for sanity checks and reports)."""
        n, o, oh, ow = self.out_shape
        _, cg, kh, kw = self.weight_shape
        return n * o * oh * ow * cg * kh * kw

    def to_json(self) -> str:
        raw = asdict(self)
        if self.is_nchw:  # the form specs had before layouts: tuning records keep matching
            del raw["data_layout"], raw["out_layout"]
        return json.dumps(raw, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ConvSpec:
        raw = json.loads(text)
        return cls(
            data_shape=tuple(raw["data_shape"]),
            weight_shape=tuple(raw["weight_shape"]),
            strides=tuple(raw["strides"]),
            padding=tuple(raw["padding"]),
            dilation=tuple(raw["dilation"]),
            groups=int(raw["groups"]),
            data_dtype=raw["data_dtype"],
            weight_dtype=raw["weight_dtype"],
            out_dtype=raw["out_dtype"],
            data_layout=raw.get("data_layout", "NCHW"),
            out_layout=raw.get("out_layout", "NCHW"),
        )

    def validate(self) -> None:
        """Raise ValueError on a spec no algorithm could compute (catches importer bugs)."""
        if len(self.data_shape) != 4 or len(self.weight_shape) != 4:
            raise ValueError(f"conv2d needs 4-d NCHW data and OIHW weight: {self}")
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(f"channels not divisible by groups: {self}")
        if self.weight_shape[1] * self.groups != self.in_channels:
            raise ValueError(f"weight in-channels do not match data / groups: {self}")
        if min(self.out_shape) <= 0:
            raise ValueError(f"empty output shape {self.out_shape}: {self}")
        for layout, channels in ((self.data_layout_, self.in_channels),
                                 (self.out_layout_, self.out_channels)):
            if layout.physical_channels(channels) != channels:
                raise ValueError(f"{layout.name} needs channels padded to whole blocks: {self}")


def tag_conv_block(
    sch: s_tir.Schedule, algorithm_name: str, spec: ConvSpec
) -> s_tir.schedule.SBlockRV:
    """Annotate the block that writes the function's output as a dlas conv; return it.

    Nested blocks (a CSR row block holding its update block) count once, as the outer one.
    """
    root = root_block(sch)
    top = {sch.get(b).name_hint for b in sch.get_child_blocks(root)}
    blocks = [b for b in sch.get_output_blocks(root) if sch.get(b).name_hint in top]
    if len(blocks) != 1:
        raise ValueError(f"conv compute must have exactly one output block, got {len(blocks)}")
    sch.annotate(blocks[0], CONV_SPEC_ATTR, spec.to_json())
    sch.annotate(blocks[0], CONV_ALGORITHM_ATTR, algorithm_name)
    return blocks[0]


def conv_spec_of(sch: s_tir.Schedule, block: s_tir.schedule.SBlockRV) -> ConvSpec | None:
    """The ConvSpec a conv block was tagged with, or None for any other block."""
    ann = sch.get(block).annotations
    if CONV_SPEC_ATTR not in ann:
        return None
    return ConvSpec.from_json(str(ann[CONV_SPEC_ATTR]))
