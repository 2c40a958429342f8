"""Layer 4, algorithms & data formats: an option is `fn(params) -> ConvAlgorithm`.

Each algorithm keeps its TE compute (what it computes) apart from its schedule (how it
runs), as TVM's TOPI does; see base.py and the per-algorithm packages.
"""
