"""The instructor's view of who joined (issue 13 item 6): the join list with the signs of cheap
identities, and removing an attendee for good (:mod:`labserver.services.joining.join_watch`).

- ``GET    /api/v1/events/{event_id}/joins`` -> every attendee with join time, user agent, joins
  from the same address (an HMAC key, never the address) and the reasons it looks suspicious
- ``DELETE /api/v1/events/{event_id}/attendees/{attendee_id}`` -> the attendee, their environment
  and their records are gone; their token stops working
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from labserver.routes.deps import Ctx, DbId, SessionDep, require
from labserver.routes.instructor.api import get_attendee, get_event
from labserver.schemas import ErrorPublic, StatusPublic
from labserver.services.joining import join_watch
from labserver.services.staff.roles import Action

router = APIRouter(prefix="/api/v1", tags=["instructor"])


class JoinPublic(BaseModel):
    id: int
    name: str
    joined_at: str
    user_agent: str | None  # None: joined before the server's last restart
    same_address: int | None  # attendees of the event that joined from the same address
    checks: int
    reasons: list[str]  # same-address | scripted | idle


@router.get(
    "/events/{event_id}/joins",
    response_model=list[JoinPublic],
    responses={404: {"model": ErrorPublic}},
    dependencies=[require(Action.view)],
)
def list_joins(event_id: DbId, ctx: Ctx, session: SessionDep) -> list[JoinPublic]:
    """Every attendee of the event with the signs of a cheap identity (services/joining/join_watch.py)."""
    event = get_event(session, event_id)
    return [JoinPublic.model_validate(row) for row in join_watch.joins(ctx, session, event)]


@router.delete(
    "/events/{event_id}/attendees/{attendee_id}",
    response_model=StatusPublic,
    responses={404: {"model": ErrorPublic}},
    dependencies=[require(Action.remove_attendee)],
)
async def remove_attendee(event_id: DbId, attendee_id: DbId, ctx: Ctx, session: SessionDep) -> StatusPublic:
    """Remove an attendee for good: shells closed, environment destroyed, records deleted."""
    event = get_event(session, event_id)
    attendee = get_attendee(session, event, attendee_id)
    await join_watch.remove(ctx, session, event=event, attendee=attendee)
    return StatusPublic(status="removed")
