"""Help with consent over HTTP (the rules: :mod:`labserver.terminals.sharing`, the changes:
:mod:`labserver.services.support.help_share`). An instructor asks from a raised hand and may end a share;
the attendee answers on their own page (``/api/v1/share``): accept, or end (decline or stop).
The writable terminal view itself is the instructor's WebSocket (``routes/terminal.py``), which
opens only on an active share."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException

from labserver.routes.deps import Ctx, CurrentAttendee, DbId, SessionDep, require
from labserver.routes.instructor.api import get_event
from labserver.schemas import ErrorPublic, SharePublic
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action
from labserver.services.support import help_share
from labserver.services.support.help_share import ShareError

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorPublic},
    409: {"model": ErrorPublic, "description": "The hand or the share is closed"},
}

attendee = APIRouter(prefix="/api/v1", tags=["attendee"])
instructor = APIRouter(prefix="/api/v1", tags=["instructor"])


# -- the attendee ------------------------------------------------------------------------------------
@attendee.get("/share", response_model=SharePublic | None)
def my_share(me: CurrentAttendee, ctx: Ctx) -> SharePublic | None:
    """The request to share my terminal that is asked or active, or null."""
    share = ctx.shares.live_of(me.id)
    return SharePublic.of(share) if share is not None else None


@attendee.post("/share/{share_id}/accept", response_model=SharePublic, responses=ERRORS)
def accept_share(share_id: DbId, me: CurrentAttendee, ctx: Ctx) -> SharePublic:
    """Let the instructor who asked type in my terminal (until either of us ends it)."""
    try:
        return SharePublic.of(help_share.accept(ctx, attendee_id=me.id, share_id=share_id))
    except LookupError as exc:
        raise HTTPException(404, f"No request to share {share_id} for you.") from exc
    except ShareError as exc:
        raise HTTPException(409, str(exc)) from exc


@attendee.delete("/share", response_model=SharePublic | None)
def end_my_share(me: CurrentAttendee, ctx: Ctx) -> SharePublic | None:
    """Decline the request to share, or stop sharing (null when there was none)."""
    share = ctx.shares.live_of(me.id)
    if share is None:
        return None
    help_share.end(ctx, share, by=me.attendee.name)
    return SharePublic.of(share)


# -- the instructor ------------------------------------------------------------------------------------
@instructor.post("/events/{event_id}/help/{help_id}/share", response_model=SharePublic, responses=ERRORS)
def ask_share(
    event_id: DbId, help_id: DbId, me: Annotated[Acting, require(Action.share)], ctx: Ctx, session: SessionDep
) -> SharePublic:
    """Ask the attendee of a raised hand to share their terminal (they accept on their page); the
    share ends with the asker's right to the event (services/staff/watch.py)."""
    get_event(session, event_id)
    try:
        share = help_share.ask(ctx, session, event_id=event_id, help_id=help_id, by=me.name)
    except LookupError as exc:
        raise HTTPException(404, f"No help request {help_id} in this event.") from exc
    except ShareError as exc:
        raise HTTPException(409, str(exc)) from exc
    ctx.staff_watch.hold_share(share.id, me.principal, event_id)
    me.note(share="asked", lab=share.lab)
    return SharePublic.of(share)


@instructor.get(
    "/events/{event_id}/shares", response_model=list[SharePublic], dependencies=[require(Action.view)]
)
def event_shares(event_id: DbId, ctx: Ctx) -> list[SharePublic]:
    """The event's requests to share that are asked or active."""
    return [SharePublic.of(s) for s in ctx.shares.live_in(event_id)]


@instructor.delete("/events/{event_id}/shares/{share_id}", response_model=SharePublic, responses=ERRORS)
def end_share(
    event_id: DbId, share_id: DbId, me: Annotated[Acting, require(Action.share)], ctx: Ctx
) -> SharePublic:
    """Stop a shared terminal (or withdraw the request)."""
    try:
        share = help_share.of_event(ctx, event_id=event_id, share_id=share_id)
    except LookupError as exc:
        raise HTTPException(404, f"No share {share_id} in this event.") from exc
    help_share.end(ctx, share, by=me.name)
    me.note(share="ended")
    return SharePublic.of(share)
