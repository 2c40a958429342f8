"""The per-conv notes a point records in `conv_fallbacks`, and their one-line summary.

A conv the point's algorithm cannot compute goes one of two ways, and the difference
matters to anyone reading a timing: it is computed by the algorithm's documented
fallback (spatial pack's depthwise convs by `direct`), or by TVM's default lowering,
which no dlas schedule touches. The runner adds a third kind of note: a conv that does
not compute in the deployed precision (an int8 model's conv left in float). The notes
are stored as text; this module writes the first two and reads all three back, so the
console's summary line can never say one thing while the lines under it say another.
"""

from __future__ import annotations

from collections import Counter

#: Suffixes that tell the kinds apart (kept as the stored rows already have them).
COMPUTED_WITH = "; computed with "
DEFAULT_LOWERING = "; default TVM lowering"
#: What `dlas.stages.import_model.precision_fallbacks` writes before the dtype a conv runs in.
RUNS_IN = "; runs in "


def algorithm_fallback(index: int, where: str, algorithm: str, reason: str,
                       fallback: str) -> str:
    """Conv `index` is computed by `fallback`, because `algorithm` cannot (`reason`)."""
    return f"conv {index} {where}: {algorithm}: {reason}{COMPUTED_WITH}{fallback}"


def default_lowering(index: int, where: str, reason: str) -> str:
    """Conv `index` gets TVM's default lowering: neither the algorithm nor a fallback."""
    return f"conv {index} {where}: {reason}{DEFAULT_LOWERING}"


def is_default_lowering(line: str) -> bool:
    return line.endswith(DEFAULT_LOWERING)


def computed_by(line: str) -> str:
    """What computes the conv a note is about: a fallback algorithm's name, "TVM's
    default lowering", or "" for notes of another kind (precision)."""
    if is_default_lowering(line):
        return "TVM's default lowering"
    head, sep, name = line.rpartition(COMPUTED_WITH)
    return name if sep and head else ""


def summary(lines: list[str], algorithm: str | None = None) -> str:
    """One line saying how many convs are not computed by the point's algorithm and by
    what instead, and how many do not run in the deployed precision."""
    by = Counter(computed_by(line) for line in lines)
    other = by.pop("", 0)
    parts = []
    if by:
        named = f"with {algorithm}" if algorithm else "with the point's algorithm"
        how = ", ".join(f"{n} with {what}" for what, n in sorted(by.items()))
        parts.append(f"{sum(by.values())} conv(s) not computed {named} ({how})")
    precision = sum(RUNS_IN in line for line in lines if not computed_by(line))
    if precision:
        parts.append(f"{precision} conv(s) not in the deployed precision")
    if other - precision:
        parts.append(f"{other - precision} other conv note(s)")
    return "; ".join(parts)


def by_reason(lines: list[str], shown: int = 6) -> list[str]:
    """The notes grouped by what they say, one line per reason with the convs it covers
    ("spatial_pack: ...; computed with direct: convs 1, 4, 7 (3)"): a model's 17
    depthwise convs that share one reason are one line on the console, not 17. The
    stored notes keep every conv's shape."""
    groups: dict[str, list[str]] = {}
    for line in lines:
        head, sep, reason = line.partition(": ")
        index = head.split(" ", 2)[1] if sep and head.startswith("conv ") else None
        key = reason if index is not None else line
        groups.setdefault(key, []).append(index or "")
    out = []
    for reason, convs in groups.items():
        named = [c for c in convs if c]
        if not named:
            out.append(reason)
            continue
        listed = ", ".join(named[:shown]) + (", ..." if len(named) > shown else "")
        out.append(f"{reason}: conv{'s' if len(named) > 1 else ''} {listed} ({len(named)})")
    return out
