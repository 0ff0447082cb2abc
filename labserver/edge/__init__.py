"""The HTTP edge: body limits, CSRF, request observation, safe JSON (README.md)."""
