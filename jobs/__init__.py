"""Scheduled jobs, runnable as `python -m jobs.<name>` from the repository root."""
