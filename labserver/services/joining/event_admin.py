"""What instructors do to events: create, edit, open/close joining, archive, list with head counts,
and broadcast announcements. Creation goes through :func:`labserver.services.joining.events.create_event`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from labserver.live import Kind
from labserver.models import Announcement, Attendee, Event, EventStatus
from labserver.schemas import AnnouncementPublic, EventPublic
from labserver.services.context import AppContext
from labserver.services.joining.events import create_event, normalize_code
from labserver.services.provisioning.warming import warm_soon

BACKENDS = ("", "local", "docker", "kubernetes")
MAX_WARM_POOL = 500


class EventError(ValueError):
    """A field is wrong; ``field`` names it for the form."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


#: attendees in one event (0: no limit); a bigger number is refused, never sent to the database
MAX_CAPACITY = 100_000


def validate(
    ctx: AppContext,
    *,
    title: str,
    labs: list[str],
    capacity: int,
    backend: str,
    starts_at: dt.datetime | None,
    ends_at: dt.datetime | None,
) -> None:
    if not title.strip():
        raise EventError("Give the event a title.", field="title")
    unknown = [lab for lab in labs if lab not in ctx.catalog.labs and lab not in ctx.catalog.broken]
    if unknown:
        raise EventError(f"Unknown lab: {', '.join(unknown)}", field="labs")
    if len(set(labs)) != len(labs):
        raise EventError("A lab is listed twice.", field="labs")
    if capacity < 0:
        raise EventError("Capacity cannot be negative (0 = unlimited).", field="capacity")
    if capacity > MAX_CAPACITY:
        raise EventError(f"Capacity is at most {MAX_CAPACITY} (0 = unlimited).", field="capacity")
    if backend not in BACKENDS:
        raise EventError(f"Unknown backend {backend!r}.", field="backend")
    if starts_at and ends_at and ends_at <= starts_at:
        raise EventError("The event must end after it starts.", field="ends_at")


def create(
    ctx: AppContext,
    session: Session,
    *,
    title: str,
    labs: list[str],
    code: str = "",
    capacity: int = 0,
    starts_at: dt.datetime | None = None,
    ends_at: dt.datetime | None = None,
    backend: str = "",
    image: str = "",
) -> Event:
    validate(
        ctx, title=title, labs=labs, capacity=capacity, backend=backend, starts_at=starts_at, ends_at=ends_at
    )
    try:
        event = create_event(
            session,
            title=title.strip(),
            labs=labs,
            code=code,
            capacity=capacity,
            backend=backend,
            image=image.strip(),
        )
    except ValueError as exc:
        raise EventError(str(exc), field="code") from exc
    event.starts_at, event.ends_at = starts_at, ends_at
    session.add(event)
    session.commit()
    session.refresh(event)
    warm_soon(ctx, event.id)  # a new event is open: its pool (if any) fills now
    return event


def update(ctx: AppContext, session: Session, event: Event, **fields: Any) -> Event:
    """Change any of title, labs, code, capacity, starts_at, ends_at, backend, image, warm_pool
    (ready environments kept for the event: its expected head count; None = the server's setting),
    seats_only (joining needs a personal code), record_input (terminal recordings keep keystrokes
    too; from the next shell opened)."""
    merged: dict[str, Any] = {
        "title": event.title,
        "labs": list(event.labs),
        "capacity": event.capacity,
        "backend": event.backend,
        "starts_at": event.starts_at,
        "ends_at": event.ends_at,
    }
    merged.update({k: v for k, v in fields.items() if k in merged})
    resize = False
    validate(ctx, **merged)
    if "code" in fields and fields["code"] is not None:
        code = normalize_code(fields["code"])
        if not code:
            raise EventError("The join code cannot be empty.", field="code")
        clash = session.exec(select(Event).where(Event.code == code, Event.id != event.id)).first()
        if clash is not None:
            raise EventError(f"An event with code {code} already exists.", field="code")
        event.code = code
    event.title = str(merged["title"]).strip()
    event.labs = list(merged["labs"])
    event.capacity = int(merged["capacity"])
    event.backend = str(merged["backend"])
    event.starts_at = merged["starts_at"]
    event.ends_at = merged["ends_at"]
    if "image" in fields and fields["image"] is not None:
        event.image = str(fields["image"]).strip()
    if fields.get("seats_only") is not None:  # personal codes only (services/joining/seats.py)
        event.seats_only = bool(fields["seats_only"])
    if fields.get("record_input") is not None:
        event.record_input = bool(fields["record_input"])
    if "warm_pool" in fields:  # None: back to the server's setting
        size = fields["warm_pool"]
        if size is not None and not 0 <= int(size) <= MAX_WARM_POOL:
            raise EventError(f"The warm pool is 0 to {MAX_WARM_POOL} environments.", field="warm_pool")
        event.warm_pool = None if size is None else int(size)
        resize = True
    session.add(event)
    session.commit()
    session.refresh(event)
    if resize:
        warm_soon(ctx, event.id)
    return event


def set_status(ctx: AppContext, session: Session, event: Event, status: str) -> Event:
    if status not in set(EventStatus):
        raise EventError(f"Unknown status {status!r}.", field="status")
    event.status = status
    session.add(event)
    session.commit()
    session.refresh(event)
    ctx.live.publish(Kind.event_status, event.id or 0, None, status=status)
    warm_soon(ctx, event.id)  # opened: its pool fills now; closed: emptied
    return event


def attendee_count(session: Session, event_id: int) -> int:
    return int(session.exec(select(func.count()).where(Attendee.event_id == event_id)).one())


def list_events(session: Session, *, include_archived: bool = True) -> list[EventPublic]:
    counts = dict(
        session.exec(select(Attendee.event_id, func.count()).group_by(col(Attendee.event_id))).all()  # type: ignore[arg-type]
    )
    q = select(Event).where(Event.selfpaced == False).order_by(col(Event.id).desc())  # noqa: E712
    if not include_archived:
        q = q.where(Event.status != EventStatus.archived)
    return [EventPublic.of(e, counts.get(e.id or 0, 0)) for e in session.exec(q).all()]


# -- announcements ----------------------------------------------------------------------------------
def broadcast(ctx: AppContext, session: Session, *, event: Event, message: str, author: str) -> Announcement:
    """Store the announcement, then publish ``announcement`` to every page of the event."""
    message = message.strip()
    if not message:
        raise EventError("Write a message first.", field="message")
    row = Announcement(event_id=event.id or 0, message=message[:2000], author=author)
    session.add(row)
    session.commit()
    session.refresh(row)
    ctx.live.publish(
        Kind.announcement,
        event.id or 0,
        None,
        id=row.id,
        message=row.message,
        author=author,
        created_at=row.created_at.isoformat(),
    )
    return row


def announcements(session: Session, *, event_id: int, limit: int = 50) -> list[AnnouncementPublic]:
    """The event's last ``limit`` announcements, newest first."""
    rows = session.exec(
        select(Announcement)
        .where(Announcement.event_id == event_id)
        .order_by(col(Announcement.id).desc())
        .limit(limit)
    ).all()
    return [AnnouncementPublic.of(a) for a in rows]
