"""How long a sweep will take: per stage and in total, on this machine and on N workers
(`dlas plan CONFIG --estimate --workers N`)."""

from dlas.estimate.estimate import Estimate, StageCost, StageSummary, estimate_sweep

__all__ = ["Estimate", "StageCost", "StageSummary", "estimate_sweep"]
