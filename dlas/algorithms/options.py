"""The convolution algorithms dlas ships (layer 4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlas.registry import NoParams, register

if TYPE_CHECKING:
    from dlas.algorithms.base import ConvAlgorithm


@register("algorithms", "direct",
          description="direct convolution: sliding window over NCHW, no data reshaping; "
                      "minimal schedule: parallel over batch x out-channels, output width "
                      "vectorized")
def direct(params: NoParams) -> ConvAlgorithm:
    from dlas.algorithms.direct import DirectConv

    return DirectConv()
