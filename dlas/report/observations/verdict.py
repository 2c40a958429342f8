"""The verdict framework: how a part of an observation is decided, and how its parts make
the observation's verdict.

Each observation is split into the parts its sentence claims. A part is *held*, *not
held*, a *tie* or *not measured*, and states its rule with its numbers, so a reader can
disagree with a threshold rather than with a hidden choice:

- *not measured*: the data it needs is missing (enough models, the algorithms it
  compares, tuned and untuned runs, two platforms, ...). `Part.needs` then says what to
  add to the sweep to decide it, in the words of a sweep config (`models`, `compression:
  weight_pruning`, `algorithms: gemm_csr`, `tuning: metaschedule`, `targets`), so a
  smaller study knows which points would settle it.
- *tie*: the timings' confidence intervals leave it undecided. Every "faster" and
  "fastest" is decided by `dlas.report.comparisons` (a difference inside the noise is a
  tie); a threshold on a statistic computed from timings (a mean share of the expected
  speedup, a geometric-mean speedup) is decided on the statistic's interval (propagated
  as the `comparisons` module says) and is a tie when the interval straddles the
  threshold. `Part.needs` then names what narrows the intervals.
- a "generally" rule (the share of cases where something holds) counts a tied case as
  possibly either way: the share lies between (decided yes) / n and (decided yes + ties)
  / n; held when even the low end passes, not held when even the high end fails, a tie
  otherwise, so a part whose cases all tie is a tie (`generally`).

`combine`: an observation is not held when a decided part fails, held when every
decided part holds and at least one is decided (ties beside it are named in its label),
a tie when every measured part is a tie, not measured when no part is; "partly measured"
when some parts are not measured.

The thresholds live here, beside the statuses, so every rule's numbers are read in one
place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dlas.report.comparisons import Statistic, above, at_least
from dlas.report.data import ReportPoint

HELD, NOT_HELD, TIE, NOT_MEASURED = "held", "not held", "tie", "not measured"

#: |Spearman rho| at or above this is a "strong" correlation.
STRONG_CORRELATION = 0.8
#: "Generally the best": the fastest in more than this share of cases.
GENERALLY = 0.5
#: Two speedups "vary" when one is at least this many times the other (or they straddle 1).
VARIES = 1.25
#: float16's accuracy change is "negligible" at or below this many percentage points.
NEGLIGIBLE_PP = 0.5
#: "Rarely the expected improvement": pruning's mean share of its ideal speedup is below.
RARELY_PCT = 50.0
#: Tuning "dramatically" accelerates: geometric-mean speedup over untuned of at least.
DRAMATIC = 2.0
#: One platform is "generally faster" than another in at least this share of matched points.
CONSISTENTLY = 0.75

#: What narrows a tie: more timing of the same points, or more cases.
TIE_NEEDS = ("narrower intervals: more timing rounds (`budgets: timing_rounds`) on a quiet "
             "machine, or more cases (another entry in `models`)")


@dataclass(frozen=True)
class ComparedPair:
    """Two points a part compared: `base` is the reference (dense, untuned, the runner-up),
    `other` the point the claim is about (pruned, tuned, the fastest). The report shows
    the layers whose times differ most between them (`dlas.report.deciding_layers`)."""

    case: str
    base: ReportPoint
    other: ReportPoint
    #: "change": the layers whose time changed most explain it; "expected": `other` is
    #: pruned and was expected to be faster by its density, so the layers that lost most
    #: time against that ideal explain it.
    kind: str = "change"


@dataclass
class Part:
    name: str
    status: str
    evidence: list[str] = field(default_factory=list)
    #: The point pairs its verdict rests on (empty for accuracy and correlation parts).
    comparisons: list[ComparedPair] = field(default_factory=list)
    #: What would decide it, in sweep-config words: what to add when it is not measured,
    #: what narrows the intervals when it is a tie; empty when it is decided.
    needs: str = ""

    def line(self, max_evidence: int) -> str:
        """'name — status: evidence; ...; to decide it: needs', evidence capped."""
        shown = self.evidence[:max_evidence]
        more = len(self.evidence) - len(shown)
        detail = "; ".join(shown) + (f"; ... {more} more" if more > 0 else "")
        needs = f"; to decide it: {self.needs}" if self.needs else ""
        return f"{self.name} — {self.status}: {detail}{needs}"


@dataclass
class Observation:
    number: int
    claim: str
    status: str
    partial: bool
    parts: list[Part]
    #: The paper's own numbers behind the claim (experiments/paper.yaml), when given.
    paper_numbers: str = ""

    @property
    def roman(self) -> str:
        return to_roman(self.number)

    @property
    def ties(self) -> int:
        """Parts that tie beside a decided verdict (a tie observation counts none)."""
        return 0 if self.status == TIE else sum(p.status == TIE for p in self.parts)

    @property
    def status_label(self) -> str:
        notes = ["partly measured"] if self.partial else []
        if self.ties:
            notes.append(f"{self.ties} part(s) a tie")
        return f"{self.status} ({'; '.join(notes)})" if notes else self.status

    @property
    def key_numbers(self) -> str:
        """The numbers behind our verdict: a deciding part's (a failing one when it did
        not hold, a tie's when it is a tie), else every measured part's; for an
        unmeasured observation, what would decide it."""
        if self.status == NOT_MEASURED:
            needs = next((p.needs for p in self.parts if p.needs), "")
            return f"to decide: {needs}" if needs else ""
        deciding = [p for p in self.parts if p.status == self.status and p.evidence]
        if deciding:
            return deciding[0].evidence[0]
        return "; ".join(p.evidence[0] for p in self.parts
                         if p.evidence and p.status != NOT_MEASURED)


def to_roman(n: int) -> str:
    numerals = [(10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in numerals:
        while n >= value:
            out, n = out + letters, n - value
    return out


def combine(number: int, claim: str, parts: list[Part], paper_numbers: str = ""
            ) -> Observation:
    """The observation's status from its parts' (see the module doc); a tie part that
    does not say what would decide it is given `TIE_NEEDS`."""
    for p in parts:
        if p.status == TIE and not p.needs:
            p.needs = TIE_NEEDS
    measured = [p for p in parts if p.status != NOT_MEASURED]
    decided = [p for p in measured if p.status in (HELD, NOT_HELD)]
    if not measured:
        status = NOT_MEASURED
    elif any(p.status == NOT_HELD for p in decided):
        status = NOT_HELD
    elif decided:
        status = HELD
    else:
        status = TIE
    return Observation(number, claim, status, bool(measured) and len(measured) < len(parts),
                       parts, paper_numbers)


# -- three-valued verdicts: True, False, or None for undecided within noise ---------------


def status_of(ok: bool | None) -> str:
    """held / not held for a decided verdict, tie for None (undecided within noise)."""
    return TIE if ok is None else HELD if ok else NOT_HELD


def negate(flag: bool | None) -> bool | None:
    return None if flag is None else not flag


def all_of(flags: Iterable[bool | None]) -> bool | None:
    """Three-valued AND: False if any is False, True if all are True, else None."""
    flags = list(flags)
    if any(f is False for f in flags):
        return False
    return True if all(f is True for f in flags) else None


def any_of(flags: Iterable[bool | None]) -> bool | None:
    """Three-valued OR: True if any is True, False if all are False, else None."""
    flags = list(flags)
    if any(f is True for f in flags):
        return True
    return False if all(f is False for f in flags) else None


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def generally(name: str, flags: Sequence[bool | None], what: str, *,
              threshold: float = GENERALLY, strict: bool = True,
              lines: Iterable[str] = (), comparisons: Iterable[ComparedPair] = ()) -> Part:
    """The share rule: `what` holds in more than (at least, unless strict) `threshold` of
    the cases; a tied case (None) may go either way, so the share is an interval."""
    n, yes = len(flags), sum(f is True for f in flags)
    unsure = sum(f is None for f in flags)
    share = Statistic(yes / n, yes / n, (yes + unsure) / n)
    ok = above(share, threshold) if strict else at_least(share, threshold)
    span = pct(share.low) + (f"-{pct(share.high)}" if unsure else "")
    head = (f"{what} in {yes} of {n} cases, {unsure} tie(s) within noise: {span} (rule: "
            f"{'>' if strict else '>='} {pct(threshold)}; a tie may go either way)")
    return Part(name, status_of(ok), [head, *lines], list(comparisons))
