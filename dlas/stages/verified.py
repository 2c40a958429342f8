"""The verification a timing entry's compiled artifact passed, kept for its next timing run.

Why: a point is timed in several passes (`budgets.timing_passes`), each in a fresh worker
whose timing entry is computed again; the compiled artifact is the same one (its key says
so), and verifying it again on every `verify_samples` input decides nothing new while it
costs seconds per model and pass (2.2 s of the 6.5 s a ResNet18-w0.5 worker of 15 variants
spends before its first round, Zen 5). So a later run re-checks one input, which must still
pass, and carries the full check's figures (its largest difference, top-1 agreement and
accuracy, `dlas.stages.timed.reverify`); a failed re-check, or no record, verifies in full.

A record is kept at `<cache>/verified/<stage>-<key>.json`. The timing entry's key covers
the compiled artifact, the inputs and the verification budgets, so a record stands only
for the same check; only passed checks are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

from dlas.integrity import write_atomically
from dlas.stages.facts import MeasureFacts

#: The record's folder under the cache root.
FOLDER = "verified"


def record_path(cache_root: Path, stage: str, key: str) -> Path:
    return Path(cache_root) / FOLDER / f"{stage}-{key}.json"


def load(cache_root: Path, stage: str, key: str) -> MeasureFacts | None:
    """The passed verification kept for the entry; None without one (or unreadable)."""
    path = record_path(cache_root, stage, key)
    try:
        facts = MeasureFacts.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None
    return facts if facts.passed else None


def save(cache_root: Path, stage: str, key: str, facts: MeasureFacts) -> None:
    """Keep a passed verification (its figures only, not its timing); written whole or
    not at all, so a worker killed meanwhile leaves no half record."""
    if not facts.passed:
        return
    kept = MeasureFacts(verification=facts.verification, fp32_agreement=facts.fp32_agreement,
                        accuracy=facts.accuracy)
    write_atomically(record_path(cache_root, stage, key), json.dumps(kept.to_meta()))
