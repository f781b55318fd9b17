"""Benchmarks that print and record figures; run from the repository root with `python -m bench`."""
