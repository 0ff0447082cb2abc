"""Attendee shells as the server holds them: sessions, recordings, sharing (README.md)."""
