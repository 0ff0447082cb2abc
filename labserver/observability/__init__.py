"""Metrics and structured logs (README.md)."""
