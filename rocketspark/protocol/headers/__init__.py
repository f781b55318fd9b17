"""Typed headers, one module per domain."""
