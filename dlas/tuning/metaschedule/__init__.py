"""Tuning-layer options: metaschedule (see options.py)."""
