"""The end of `dlas run` names the paper's observations its rows decided
(`dlas.report.observations.decided`), within the summary's width."""

from __future__ import annotations

from dlas.report.observations.decided import decided_lines
from dlas.report.observations.verdict import HELD, NOT_HELD, NOT_MEASURED, TIE, Observation, Part


def _obs(number: int, status: str, evidence: str = "", needs: str = "") -> Observation:
    part = Part("a part", status, [evidence] if evidence else [], needs=needs)
    return Observation(number, "A claim the paper makes about the stack " * 4, status,
                       False, [part])


def test_decided_observations_get_their_claim_and_numbers_within_the_width() -> None:
    found = [_obs(1, NOT_MEASURED, needs="two models"), _obs(10, HELD, "17.7% of ideal " * 9),
             _obs(11, NOT_HELD, "1.79x over 1 point"), _obs(12, TIE, "1.0x [0.9, 1.1]")]
    lines = decided_lines(found, width=100)
    assert all(len(line) <= 100 for line in lines)
    assert lines[0].startswith("observations this sweep decided")
    assert lines[1].startswith("  X     held: A claim") and lines[1].endswith("…")
    assert lines[2].startswith("        17.7% of ideal")
    assert lines[3].startswith("  XI    not held: ") and lines[4] == "        1.79x over 1 point"
    assert "2 undecided" in lines[5]
    assert [line.split()[0] for line in lines if line.startswith("  ") and
            not line.startswith("   ")][:2] == ["X", "XI"]  # neither I (unmeasured) nor XII


def test_a_sweep_that_decides_nothing_says_so() -> None:
    lines = decided_lines([_obs(1, NOT_MEASURED), _obs(2, TIE, "x")], width=60)
    assert lines[1] == "  none: this sweep's rows decide none of them"
    assert "2 undecided" in lines[2] and all(len(line) <= 60 for line in lines)
    assert decided_lines([], width=60) == []
