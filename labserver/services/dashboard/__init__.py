"""The instructor's room: the grid and its deltas, stuck detection, pacing, actions on environments (README.md)."""
