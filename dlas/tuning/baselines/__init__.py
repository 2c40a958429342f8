"""Baselines on the systems-software layer: the compressed model run by what a user would
otherwise deploy (PyTorch eager, ONNX Runtime), verified and timed exactly as the TVM
variants are, so reports can put every TVM variant beside them. See base.py for the
contract and options.py for the options."""

from dlas.registry import BASELINE_TAG

__all__ = ["BASELINE_TAG"]
