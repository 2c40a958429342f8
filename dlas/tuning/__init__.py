"""Layer 5, systems software (TVM tuning): see base.py for the option contract."""
