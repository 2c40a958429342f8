"""Layer 2, models: an option is `fn(params, num_classes, input_shape) -> torch.nn.Module`.

The runner trains the returned (untrained) module with the sweep's budgets.
"""
