"""The confidence threshold your DSpark loop uses (step 4): pick it from `python sweep.py`'s plot."""

TAU: float | None = None  # TODO(step 4)
