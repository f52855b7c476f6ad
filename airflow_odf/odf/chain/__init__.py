"""Metadata Chain and Dataset Layout: the chain rules, a dataset (commits by compare-and-swap), its
summary, integrity checks and reading its data."""
