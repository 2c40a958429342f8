"""Layer 6, hardware: an option is `fn(params) -> TargetSpec` (see base.py)."""
