"""Pacing: the steps of a lab the instructor has unlocked for the room (``Event.pace``: lab id ->
steps open; a lab absent from it is open to the end). Pure; set by ``services/dashboard/room.set_pace``."""

from __future__ import annotations

from labserver.content import Lab
from labserver.models import Event


def unlocked_steps(event: Event, lab: Lab) -> int:
    return min(event.pace.get(lab.id, len(lab.steps)), len(lab.steps))


def is_locked(event: Event, lab: Lab, step_index: int) -> bool:
    return step_index >= unlocked_steps(event, lab)
