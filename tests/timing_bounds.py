"""How a test may compare two timings: by order of magnitude only.

A ratio of two timings taken on a shared 2-vCPU VM depends on the host: the same
profile's layers-plus-outside over the model's latency read 1.0 on Zen 5, 1.31 on a
Xeon Cascade Lake and 1.42 on a Zen 3, each with nothing else running. A test that
asserts such a ratio within 15% decides whether a submission lands by which machine CI
gets (it failed CI twice). So tests check what is structural exactly (which kernels
were timed, that the sums are the sums of their parts) and compare timings only within
`FACTOR`: wide enough for any host seen, narrow enough to catch a kernel counted twice
or left out of a sum (a ratio of 2 or more, or of one half or less). How close the
timings come is measured, per host, by benchmarks (`benchmarks/kernels.py`), not here.
"""

from __future__ import annotations

#: The widest ratio of two timings of the same work a test accepts (exclusive).
FACTOR = 1.9


def assert_same_work_timing(numerator: float | None, denominator: float | None,
                            what: str) -> None:
    """Fail when two timings of the same work differ by `FACTOR` or more."""
    assert numerator is not None and denominator is not None, what
    assert numerator > 0 and denominator > 0, (what, numerator, denominator)
    ratio = numerator / denominator
    assert 1 / FACTOR < ratio < FACTOR, f"{what}: {numerator:.4g} / {denominator:.4g} = {ratio:.3f}"
