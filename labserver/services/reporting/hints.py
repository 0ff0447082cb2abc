"""Hints opened: the first time an attendee opens a step's hints is stored (one row per attendee and
step), so the post-event report can say how many people needed them. Opening them again, from two
tabs at once or thirty times, changes nothing."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from labserver.models import HintOpen


def open_hints(session: Session, *, event_id: int, attendee_id: int, lab_id: str, step_id: str) -> bool:
    """Record that the attendee opened the hints of ``lab_id/step_id`` (committed); True when this
    was the first time."""
    found = session.exec(
        select(HintOpen.id).where(
            HintOpen.attendee_id == attendee_id, HintOpen.lab_id == lab_id, HintOpen.step_id == step_id
        )
    ).first()
    if found is not None:
        return False
    session.add(HintOpen(event_id=event_id, attendee_id=attendee_id, lab_id=lab_id, step_id=step_id))
    try:
        session.commit()
    except IntegrityError:  # the same attendee, another tab, at the same moment
        session.rollback()
        return False
    return True
