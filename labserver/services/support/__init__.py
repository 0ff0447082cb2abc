"""Helping attendees: raised hands, help with consent, the live gallery, terminal recordings (README.md)."""
