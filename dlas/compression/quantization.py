"""Reduced-precision compression options (float16, int8); registered via its own entry point."""
