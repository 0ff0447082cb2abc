"""Personal join codes ("seats"): one code per attendee, used once.

An event code on the screen lets anyone in the room (or anyone who saw a photo of it) join under
as many names as they like. For a room where that matters, the instructor prints one code per
seat (``POST /api/v1/events/{id}/seats``) and switches the event to ``seats_only``: the event code
then no longer admits anyone, and each personal code admits exactly one attendee.

- A code is ten letters and digits (``CODE_ALPHABET``: no 0/O, 1/I), shown as ``ABCDE-FGHJK``;
  dashes and spaces are ignored when typed. Only its SHA-256 is stored: the codes are shown once,
  to the instructor who made them.
- :func:`labserver.services.joining.events.join` takes a seat with one conditional ``UPDATE`` (``WHERE
  attendee_id IS NULL``): thirty browsers joining with one code at once give one attendee, never two.
- A removed attendee's seat stays used: the instructor hands out a new code.
"""

from __future__ import annotations

import secrets

from sqlalchemy import func
from sqlmodel import Session, col, select

from labserver.models import Event, Seat
from labserver.services.joining.events import CODE_ALPHABET, SEAT_CODE_LENGTH, seat_hash

MAX_SEATS_PER_CALL = 1000


def new_seat_code() -> str:
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(SEAT_CODE_LENGTH))
    return f"{raw[:5]}-{raw[5:]}"


def issue(session: Session, event: Event, count: int) -> list[str]:
    """``count`` new personal codes for ``event`` (returned once, stored hashed)."""
    if not 1 <= count <= MAX_SEATS_PER_CALL:
        raise ValueError(f"Make 1 to {MAX_SEATS_PER_CALL} codes at a time.")
    assert event.id is not None
    codes = [new_seat_code() for _ in range(count)]
    session.add_all(Seat(event_id=event.id, code_hash=seat_hash(code)) for code in codes)
    session.commit()
    return codes


def counts(session: Session, event_id: int) -> tuple[int, int]:
    """(codes made, codes used) for the event."""
    total = session.exec(select(func.count()).select_from(Seat).where(Seat.event_id == event_id)).one()
    used = session.exec(
        select(func.count())
        .select_from(Seat)
        .where(Seat.event_id == event_id, col(Seat.attendee_id).is_not(None))
    ).one()
    return int(total), int(used)
