"""The instructor's room over HTTP: one router of JSON API and pages (README.md)."""
