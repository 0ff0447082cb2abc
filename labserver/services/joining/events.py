"""Events and attendees: the default event, joining (with the event code, or a personal code:
:mod:`labserver.services.joining.seats`), tokens."""

from __future__ import annotations

import hashlib
import logging
import re
import secrets

from sqlalchemy import update
from sqlmodel import Session, col, select

from labserver import clock
from labserver.models import Attendee, Event, EventStatus, Seat
from labserver.observability import logging_json

log = logging.getLogger(__name__)

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
SEAT_CODE_LENGTH = 10  # a personal code (services/joining/seats.py); event codes are shorter


class JoinError(Exception):
    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def new_code(length: int = 6) -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(length))


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def normalize_code(code: str) -> str:
    return re.sub(r"[\s-]", "", code).upper()


def create_event(
    session: Session,
    *,
    title: str,
    labs: list[str],
    code: str = "",
    selfpaced: bool = False,
    capacity: int = 0,
    backend: str = "",
    image: str = "",
) -> Event:
    code = normalize_code(code) or new_code()
    if session.exec(select(Event).where(Event.code == code)).first():
        raise ValueError(f"an event with code {code} already exists")
    event = Event(
        code=code,
        title=title,
        labs=labs,
        selfpaced=selfpaced,
        capacity=capacity,
        backend=backend,
        image=image,
    )
    session.add(event)
    session.commit()
    session.refresh(event)
    return event


def ensure_default_event(session: Session, *, title: str, labs: list[str], code: str) -> tuple[Event, bool]:
    """The event ``serve`` opens on first start; (event, created)."""
    existing = session.exec(select(Event).where(Event.selfpaced == False).order_by(col(Event.id))).first()  # noqa: E712
    if existing:
        return existing, False
    return create_event(session, title=title, labs=labs, code=code), True


def find_event_by_code(session: Session, code: str) -> Event | None:
    return session.exec(select(Event).where(Event.code == normalize_code(code))).first()


def seat_hash(code: str) -> str:
    return hash_token("seat:" + normalize_code(code))


def find_seat(session: Session, code: str) -> Seat | None:
    """The personal code (seat) a typed code names, in any event, or None."""
    if len(normalize_code(code)) != SEAT_CODE_LENGTH:
        return None
    return session.exec(select(Seat).where(Seat.code_hash == seat_hash(code))).first()


def _claim_seat(session: Session, seat: Seat, attendee_id: int) -> bool:
    """Bind ``seat`` to ``attendee_id`` unless another attendee got it first (one conditional
    UPDATE: atomic on SQLite and PostgreSQL); commits."""
    result = session.execute(
        update(Seat)
        .where(col(Seat.id) == seat.id, col(Seat.attendee_id).is_(None))
        .values(attendee_id=attendee_id)
    )
    session.commit()
    return bool(result.rowcount)  # type: ignore[attr-defined]


def _seat_used() -> JoinError:
    return JoinError(
        "This personal code has already been used. Each code admits one person: ask the instructor for a new one.",
        code="seat-used",
    )


def join(session: Session, *, event_code: str, name: str, lang: str = "") -> tuple[Attendee, str, Event]:
    """Join an event; returns (attendee, token, event). Joining again with the same name from a new
    browser is refused (the name is taken) — an attendee who lost their cookie asks the instructor."""
    name = " ".join(name.split())
    if not name:
        raise JoinError("Please enter your name.", code="name-missing")
    if len(name) > 80:
        raise JoinError("That name is too long (80 characters at most).", code="name-too-long")
    event = find_event_by_code(session, event_code) if event_code.strip() else None
    seat = None if event is not None or not event_code.strip() else find_seat(session, event_code)
    if seat is not None:
        if seat.attendee_id is not None:
            raise _seat_used()
        event = session.get(Event, seat.event_id)
    elif event is not None and event.seats_only:
        raise JoinError(
            "This event admits attendees with a personal code: type the code on your slip "
            "(ten letters and digits) instead of the event code. No slip? Ask the instructor.",
            code="seat-required",
        )
    if event is None:
        raise JoinError(
            "No event has this code. Check the code on the screen (letters and digits, "
            "no O or I) and try again.",
            code="wrong-code",
        )
    if event.status != EventStatus.open:
        raise JoinError("This event is not open for joining. Ask the instructor.", code="closed")
    # joins of one event take turns from here to the commit below: the name and the capacity are
    # counted with no other join of the event in between (PostgreSQL: a row lock on the event;
    # SQLite has one writer at a time and ignores it). Without it, thirty joins at once on
    # PostgreSQL admitted 6 to a room of 5: ids are handed out at insert, not in commit order.
    session.exec(select(Event.id).where(Event.id == event.id).with_for_update()).first()
    if session.exec(select(Attendee).where(Attendee.event_id == event.id, Attendee.name == name)).first():
        raise JoinError(
            "Someone in this event already uses that name. Add your surname or a number.", code="name-taken"
        )
    if event.capacity:
        count = len(session.exec(select(Attendee.id).where(Attendee.event_id == event.id)).all())
        if count >= event.capacity:
            raise JoinError("This event is full. Ask the instructor.", code="full")
    token = secrets.token_urlsafe(32)
    assert event.id is not None
    attendee = Attendee(event_id=event.id, name=name, token_hash=hash_token(token), lang=lang)
    session.add(attendee)
    session.commit()
    session.refresh(attendee)
    if seat is not None and not _claim_seat(session, seat, attendee.id or 0):
        # another browser took this code a moment ago (thirty tabs, one slip): that one is in
        session.delete(attendee)
        session.commit()
        raise _seat_used()
    if event.capacity and _admitted_before(session, attendee) > event.capacity:
        # joins racing past the count above: the ones with the larger ids step back (issue 13 item 6)
        session.delete(attendee)
        session.commit()
        raise JoinError("This event is full. Ask the instructor.", code="full")
    logging_json.bind(event_id=event.id, attendee_id=attendee.id)
    log.info("attendee %s joined event %s", attendee.id, event.id)
    return attendee, token, event


def _admitted_before(session: Session, attendee: Attendee) -> int:
    """Attendees of the event with an id up to ``attendee``'s (committed), itself included."""
    rows = session.exec(
        select(Attendee.id).where(Attendee.event_id == attendee.event_id, col(Attendee.id) <= attendee.id)
    ).all()
    return len(rows)


def attendee_for_token(session: Session, token: str) -> Attendee | None:
    if not token:
        return None
    attendee = session.exec(select(Attendee).where(Attendee.token_hash == hash_token(token))).first()
    if attendee is not None:
        now = clock.now()
        last = attendee.last_seen_at
        if last.tzinfo is None:
            last = last.replace(tzinfo=now.tzinfo)
        if (now - last).total_seconds() > 30:
            attendee.last_seen_at = now
            session.add(attendee)
            session.commit()
    return attendee
