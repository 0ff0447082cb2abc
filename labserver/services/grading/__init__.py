"""The Check button: the fair queue, running and committing checks, not-gradable runs (README.md)."""
