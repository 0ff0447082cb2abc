"""An event's staff and its audit log over the JSON API (tag ``instructor``; the rights of each
route are in :mod:`labserver.services.staff.roles`, enforced by :func:`~labserver.routes.deps.require`):

- ``GET    /api/v1/staff/me``                               who I am and what I may do (any staff)
- ``GET    /api/v1/events/{event_id}/staff``                the people who reach the event (view)
- ``POST   /api/v1/events/{event_id}/staff``                add a person with a role on the event,
  answered once with their one-time sign-in link or password (staff)
- ``DELETE /api/v1/events/{event_id}/staff/{staff_id}``     take their roles on the event away (staff)
- ``DELETE /api/v1/staff/{staff_id}``                       remove the person everywhere (server)
- ``GET    /api/v1/events/{event_id}/audit``                the audit log, newest first (view)
- ``GET    /api/v1/events/{event_id}/audit.csv``            the audit log as CSV (export)
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, Field

from labserver import clock
from labserver.i18n import gettext, pick_lang
from labserver.routes.deps import Ctx, DbId, DbIdQuery, SessionDep, require
from labserver.routes.instructor.api import get_event
from labserver.schemas import AuditPublic, ErrorPublic, RolePublic, StaffAdded, StaffMe, StaffPublic, media
from labserver.services.staff import accounts, audit
from labserver.services.staff.accounts import StaffError
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action, Role, allowed

router = APIRouter(prefix="/api/v1", tags=["instructor"])


class StaffIn(BaseModel):
    name: str = Field(max_length=200)
    role: str = Field(default=Role.assistant.value, max_length=16)
    email: str = Field(default="", max_length=200)
    password: bool = False  # a generated password instead of a one-time link


@router.get("/staff/me", response_model=StaffMe)
def whoami(me: Annotated[Acting, require(Action.view)], event: DbIdQuery = None) -> StaffMe:
    """The signed-in staff member: name, roles, and what they may do on ``?event=``."""
    return StaffMe(
        name=me.name,
        staff_id=me.principal.staff_id,
        roles=[RolePublic(role=str(g.role), event_id=g.event_id) for g in me.principal.grants],
        allowed=allowed(me.principal.grants, event) if event is not None else [],
    )


@router.get("/events/{event_id}/staff", response_model=list[StaffPublic])
def event_staff(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> list[StaffPublic]:
    """The people who reach this event (a role on it or on every event), by name."""
    get_event(session, event_id)
    return [StaffPublic.of(staff, grants) for staff, grants in accounts.on_event(session, event_id)]


@router.post(
    "/events/{event_id}/staff",
    status_code=201,
    response_model=StaffAdded,
    responses={400: {"model": ErrorPublic}},
)
def add_staff(
    event_id: DbId,
    body: StaffIn,
    request: Request,
    ctx: Ctx,
    session: SessionDep,
    me: Annotated[Acting, require(Action.staff)],
) -> StaffAdded:
    """Give a person a role on this event; the answer carries their one-time sign-in link (or a
    password), shown this once."""
    get_event(session, event_id)
    try:
        added = accounts.add(
            session,
            name=body.name,
            role=body.role,
            event_id=event_id,
            email=body.email,
            password=body.password,
            link_hours=ctx.settings.staff.link_hours,
        )
    except StaffError as exc:
        message = gettext(pick_lang(request), exc.message).format(**exc.params)
        raise HTTPException(400, {"message": message, "field": exc.field}) from exc
    me.target = f"staff {added.staff.name}"
    me.note(change="added", role=body.role.strip().lower())
    assert added.staff.id is not None
    link = str(request.base_url).rstrip("/") + f"/instructor/signin/{added.link}" if added.link else ""
    return StaffAdded(
        staff=StaffPublic.of(added.staff, accounts.grants_of(session, added.staff.id)),
        link=link,
        password=added.password,
        expires_in_hours=ctx.settings.staff.link_hours if added.link else None,
    )


@router.delete(
    "/events/{event_id}/staff/{staff_id}", response_model=StaffPublic, responses={404: {"model": ErrorPublic}}
)
def remove_from_event(
    event_id: DbId,
    staff_id: DbId,
    ctx: Ctx,
    session: SessionDep,
    me: Annotated[Acting, require(Action.staff)],
) -> StaffPublic:
    """Take the person's roles on this event away: their pages and streams of it end within seconds."""
    try:
        staff = accounts.remove_from_event(session, staff_id=staff_id, event_id=event_id)
    except LookupError as exc:
        raise HTTPException(404, f"Staff member {staff_id} has no role on this event.") from exc
    me.note(change="removed from the event")
    ctx.staff_watch.poke(ctx.loop)
    return StaffPublic.of(staff, accounts.grants_of(session, staff_id))


@router.delete("/staff/{staff_id}", response_model=StaffPublic, responses={404: {"model": ErrorPublic}})
def remove_person(
    staff_id: DbId, ctx: Ctx, session: SessionDep, me: Annotated[Acting, require(Action.server)]
) -> StaffPublic:
    """Remove a person from the staff: every session, stream, terminal view and share of theirs
    ends within seconds; each event they were on logs it."""
    events = {g.event_id for g in accounts.grants_of(session, staff_id)}
    try:
        staff = accounts.remove(session, staff_id=staff_id)
    except LookupError as exc:
        raise HTTPException(404, f"No staff member {staff_id}.") from exc
    ctx.staff_watch.poke(ctx.loop)
    for event_id in sorted(e for e in events if e is not None):
        audit.record(
            ctx.engine,
            Acting(me.principal, Action.staff, event_id, f"staff {staff.name}", detail={"change": "removed"}),
        )
    return StaffPublic.of(staff, [])


@router.get("/events/{event_id}/audit", response_model=list[AuditPublic])
def audit_log(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.view)], limit: int = 200
) -> list[AuditPublic]:
    """The event's audit log, newest first (at most ``limit`` lines)."""
    get_event(session, event_id)
    return [AuditPublic.of(row) for row in audit.of_event(session, event_id, limit=max(1, min(limit, 5000)))]


@router.get(
    "/events/{event_id}/audit.csv", response_class=Response, responses=media("text/csv", "The audit log")
)
def audit_csv(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.export)]
) -> Response:
    """The event's whole audit log as CSV, as a download."""
    event = get_event(session, event_id)
    body = audit.export_csv(audit.of_event(session, event_id, limit=None))
    name = f"labserver-audit-{event.code}-{clock.now():%Y%m%d-%H%M}.csv"
    return Response(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
