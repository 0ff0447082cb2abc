"""The raised-hands queue. Attendees raise (``POST /api/v1/help``, attendee API); instructors claim and
resolve here. Each change is committed, then published with the attendee's id, so the attendee's own
stream sees ``help.claimed`` ("someone is coming", with ``by``) and ``help.resolved``, and every
instructor stream sees them too."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlmodel import Session, col, select

from labserver import clock
from labserver.live import Kind
from labserver.models import Attendee, HelpRequest, HelpState
from labserver.services.context import AppContext

ACTIVE = (HelpState.open, HelpState.claimed)


class HelpError(Exception):
    pass


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def queue(session: Session, *, event_id: int, now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Open and claimed requests of the event, oldest first, with the waiting time in seconds."""
    now = now or clock.now()
    rows = session.exec(
        select(HelpRequest, Attendee.name)
        .join(Attendee, col(Attendee.id) == HelpRequest.attendee_id)
        .where(HelpRequest.event_id == event_id, col(HelpRequest.state).in_(ACTIVE))
        .order_by(col(HelpRequest.created_at), col(HelpRequest.id))
    ).all()
    return [
        {
            "id": h.id,
            "attendee_id": h.attendee_id,
            "name": name,
            "lab": h.lab_id,
            "step": h.step_id,
            "note": h.note,
            "state": h.state,
            "claimed_by": h.claimed_by,
            "created_at": _aware(h.created_at).isoformat(),
            "waiting_s": round(max(0.0, (now - _aware(h.created_at)).total_seconds())),
        }
        for h, name in rows
    ]


def _get(session: Session, event_id: int, help_id: int) -> HelpRequest:
    h = session.get(HelpRequest, help_id)
    if h is None or h.event_id != event_id:
        raise LookupError(help_id)
    return h


def claim(ctx: AppContext, session: Session, *, event_id: int, help_id: int, by: str) -> HelpRequest:
    """Mark the request as being handled by ``by``. Claiming a claimed request takes it over."""
    h = _get(session, event_id, help_id)
    if h.state not in ACTIVE:
        raise HelpError("This request is already closed.")
    h.state = HelpState.claimed
    h.claimed_by = by
    h.claimed_at = clock.now()
    session.add(h)
    session.commit()
    session.refresh(h)
    ctx.live.publish(Kind.help_claimed, event_id, h.attendee_id, help_id=h.id, by=by)
    return h


def resolve(ctx: AppContext, session: Session, *, event_id: int, help_id: int, by: str) -> HelpRequest:
    h = _get(session, event_id, help_id)
    if h.state not in ACTIVE:
        raise HelpError("This request is already closed.")
    h.state = HelpState.resolved
    h.claimed_by = h.claimed_by or by
    h.resolved_at = clock.now()
    session.add(h)
    session.commit()
    session.refresh(h)
    ctx.live.publish(Kind.help_resolved, event_id, h.attendee_id, help_id=h.id, by=by)
    return h
