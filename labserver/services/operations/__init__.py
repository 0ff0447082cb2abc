"""The server looking after itself: doctor, /metrics, housekeeping, recovery after a crash (README.md)."""
