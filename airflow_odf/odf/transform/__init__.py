"""Derivative Transformations: plan batches pinned to input blocks, execute them, checkpoints, query
evolution and reproducibility verification."""
