"""Layer 1, datasets: an option is `fn(params, seed) -> DatasetBundle` (see base.py)."""
