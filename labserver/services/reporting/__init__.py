"""Progress, hints, progress files, completion records and the post-event report (README.md)."""
