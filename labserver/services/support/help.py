"""The raised-hands queue, and every query on it. Attendees raise, look at and cancel their hand
(``/api/v1/help``); instructors claim and resolve. Each change is committed, then published with the
attendee's id, so the attendee's own stream sees ``help.claimed`` ("someone is coming", with ``by``)
and ``help.resolved``, and every instructor stream sees ``help.*`` too. Closing a hand (cancel,
resolve) ends its shared terminal, if any (services/support/help_share.py). Routes never query
``HelpRequest`` themselves."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlmodel import Session, col, select

from labserver import clock
from labserver.live import Kind
from labserver.models import Attendee, HelpRequest, HelpState
from labserver.schemas import HelpQueueItem
from labserver.services.context import AppContext
from labserver.services.support import help_share

ACTIVE = (HelpState.open, HelpState.claimed)


class HelpError(Exception):
    pass


def _active(attendee_id: int):  # type: ignore[no-untyped-def]
    return select(HelpRequest).where(
        HelpRequest.attendee_id == attendee_id, col(HelpRequest.state).in_(ACTIVE)
    )


def active_of(session: Session, *, attendee_id: int) -> HelpRequest | None:
    """The attendee's open or claimed request (the newest), or None."""
    return session.exec(_active(attendee_id).order_by(col(HelpRequest.id).desc())).first()


def of_attendee(session: Session, *, attendee_id: int) -> Sequence[HelpRequest]:
    """Every request the attendee ever made, newest first (the instructor's drill-down)."""
    return session.exec(
        select(HelpRequest).where(HelpRequest.attendee_id == attendee_id).order_by(col(HelpRequest.id).desc())
    ).all()


def raise_hand(
    ctx: AppContext, session: Session, *, attendee: Attendee, lab: str, step: str, note: str
) -> HelpRequest:
    """Raise the attendee's hand (or update the one already raised: one per attendee), then publish
    ``help.raised``."""
    assert attendee.id is not None
    h = session.exec(_active(attendee.id)).first()
    if h is None:
        h = HelpRequest(
            event_id=attendee.event_id, attendee_id=attendee.id, lab_id=lab, step_id=step, note=note
        )
    else:
        h.note, h.lab_id, h.step_id = note or h.note, lab, step
    session.add(h)
    session.commit()
    session.refresh(h)
    ctx.live.publish(
        Kind.help_raised,
        attendee.event_id,
        attendee.id,
        help_id=h.id,
        name=attendee.name,
        lab=lab,
        step=step,
        note=note,
    )
    return h


def cancel(ctx: AppContext, session: Session, *, attendee: Attendee) -> int:
    """Cancel the attendee's open requests; commit, then publish ``help.cancelled`` for each.
    Returns how many."""
    assert attendee.id is not None
    rows = list(session.exec(_active(attendee.id)).all())
    for h in rows:
        h.state = HelpState.cancelled
        session.add(h)
    session.commit()
    for h in rows:
        ctx.live.publish(Kind.help_cancelled, attendee.event_id, attendee.id, help_id=h.id)
    help_share.end_for_attendee(ctx, attendee_id=attendee.id, by=attendee.name)
    return len(rows)


def queue(session: Session, *, event_id: int, now: dt.datetime | None = None) -> list[HelpQueueItem]:
    """Open and claimed requests of the event, oldest first, with the waiting time in seconds."""
    now = now or clock.now()
    rows = session.exec(
        select(HelpRequest, Attendee.name)
        .join(Attendee, col(Attendee.id) == HelpRequest.attendee_id)
        .where(HelpRequest.event_id == event_id, col(HelpRequest.state).in_(ACTIVE))
        .order_by(col(HelpRequest.created_at), col(HelpRequest.id))
    ).all()
    return [HelpQueueItem.queued(h, name, now) for h, name in rows]


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
    help_share.end_for_attendee(ctx, attendee_id=h.attendee_id, by=by)
    return h
