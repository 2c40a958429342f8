"""dlas: across-stack studies of deep-learning inference (after the DLAS paper)."""

__version__ = "0.1.0"
