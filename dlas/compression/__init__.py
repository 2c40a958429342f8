"""Layer 3, model optimizations: see base.py for the option contract."""
