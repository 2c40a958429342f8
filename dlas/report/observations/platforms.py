"""Hardware platforms against each other (observation XIII, the paper's Section 6.6).

The rule: per pair of platforms of one kind (CPU or GPU), their matched points (the same
model, compression, algorithm, tuning and the layout the config asked for: NCHWc's block
is each CPU's SIMD width) by `faster`; the winner's share >= 75% (`CONSISTENTLY`), a tie
counting for either.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from dlas.report.comparisons import Statistic, at_least, faster, ties_line
from dlas.report.data import ReportPoint
from dlas.report.observations.analysis import Analysis
from dlas.report.observations.verdict import (
    CONSISTENTLY,
    NOT_MEASURED,
    Part,
    all_of,
    pct,
    status_of,
)


def _platform_pair(x: str, y: str, px: dict[tuple, ReportPoint], py: dict[tuple, ReportPoint]
                   ) -> tuple[bool | None, list[str]]:
    """Whether one of two platforms is faster in >= CONSISTENTLY of their matched points
    (ties may go to either), with its evidence."""
    common = px.keys() & py.keys()
    verdicts = [faster(px[k], py[k]) for k in common]
    x_faster = sum(v is True for v in verdicts)
    y_faster = sum(v is False for v in verdicts)
    ties = len(common) - x_faster - y_faster
    winner, n = (x, x_faster) if x_faster >= y_faster else (y, y_faster)
    share = Statistic(n / len(common), n / len(common), (n + ties) / len(common))
    return at_least(share, CONSISTENTLY), [
        f"{winner} decidedly faster in {n} of {len(common)} matched points ({x} vs {y}; a "
        f"tie may go either way: {pct(share.low)}-{pct(share.high)})",
        ties_line(len(common), ties)]


def one_platform_generally_faster_than_another(a: Analysis) -> list[Part]:
    """XIII: per kind of device, every pair of platforms timing the same points."""
    parts = []
    for device in ("cpu", "gpu"):
        times: dict[str, dict[tuple, ReportPoint]] = defaultdict(dict)
        for p in a.points:
            if p.device == device and p.latency_ms is not None:
                # the layout as configured: NCHWc is NCHW16c on one CPU, NCHW4c on another
                key = (p.dataset, p.model_label, p.compression, p.algorithm,
                       p.layout_choice, p.tuning)
                times[p.platform][key] = p
        lines, flags = [], []
        for x, y in itertools.combinations(sorted(times), 2):
            if times[x].keys() & times[y].keys():
                flag, more = _platform_pair(x, y, times[x], times[y])
                flags.append(flag)
                lines += more
        name = f"one {device.upper()} generally faster than another"
        if not flags:
            target = "`cuda` on another GPU" if device == "gpu" else "`remote`, an Arm " \
                "board over TVM RPC"
            parts.append(Part(name, NOT_MEASURED,
                              [f"needs two {device.upper()} platforms running the same points"],
                              needs=f"a second {device.upper()} platform in `targets` (e.g. "
                                    f"{target}) timing the same points"))
        else:
            parts.append(Part(name, status_of(all_of(flags)), lines + [
                f"rule: one platform faster in >= {pct(CONSISTENTLY)} of matched points"]))
    return parts
