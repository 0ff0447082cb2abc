"""Instructor JSON API under ``/api/v1`` (tag ``instructor``). Every route takes
:func:`~labserver.routes.deps.require` with the action it is (services/staff/roles.py: who may), so
an attendee token, no credentials or a role without the right get 403, and an audited action writes
its line to the event's audit log;
credentials get 403. Routes are thin: parse, call a ``services`` function, answer with a model of
:mod:`labserver.schemas`."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, Field
from sqlmodel import Session
from sse_starlette.sse import EventSourceResponse

from labserver import clock
from labserver.content import Lab, Step
from labserver.i18n import pick_lang
from labserver.models import Attendee, Environment, Event
from labserver.routes.deps import Ctx, DbId, DbIdQuery, SessionDep, require
from labserver.routes.instructor.stream import GRID_KINDS, instructor_stream, prefetch
from labserver.schemas import (
    SSE,
    AnnouncementPublic,
    AttendeeDetailPublic,
    AttendeeInfo,
    CheckRunPublic,
    EnvironmentPublic,
    ErrorPublic,
    EventPublic,
    ExportPublic,
    GridPublic,
    HelpPublic,
    HelpQueueItem,
    PacePublic,
    ResetPublic,
    RevealPublic,
    SeatsPublic,
    StopAllPublic,
    StuckPublic,
    SummaryPublic,
    json_file,
    media,
)
from labserver.services.context import AppContext
from labserver.services.dashboard import env_admin, room
from labserver.services.grading import checking
from labserver.services.joining import event_admin, seats
from labserver.services.joining.event_admin import MAX_CAPACITY, EventError
from labserver.services.provisioning.environments import event_labs, get_row, reset_lab
from labserver.services.reporting.completion_chart import chart_svg
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action, events_seen
from labserver.services.support import help
from labserver.services.support.help import HelpError

router = APIRouter(prefix="/api/v1", tags=["instructor"])


class EventIn(BaseModel):
    title: str = Field(max_length=200)
    labs: list[str] = Field(default_factory=list)
    code: str = Field(default="", max_length=64)
    capacity: int = Field(default=0, ge=0, le=MAX_CAPACITY)
    starts_at: dt.datetime | None = None
    ends_at: dt.datetime | None = None
    backend: str = ""
    image: str = Field(default="", max_length=200)


class EventPatch(BaseModel):
    title: str | None = Field(default=None, max_length=200)
    labs: list[str] | None = None
    code: str | None = Field(default=None, max_length=64)
    capacity: int | None = Field(default=None, ge=0, le=MAX_CAPACITY)
    starts_at: dt.datetime | None = None
    ends_at: dt.datetime | None = None
    backend: str | None = None
    image: str | None = Field(default=None, max_length=200)
    warm_pool: int | None = (
        None  # ready environments for the event (expected head count); null = server default
    )
    seats_only: bool | None = None  # joining needs a personal code
    record_input: bool | None = None  # terminal recordings keep keystrokes too (off: output only)


class SeatsIn(BaseModel):
    count: int = Field(ge=1, le=seats.MAX_SEATS_PER_CALL)


class StatusIn(BaseModel):
    status: str


class PaceIn(BaseModel):
    lab: str
    unlocked: int | None = Field(default=None, ge=0, le=10_000)  # None: every step open


class AnnouncementIn(BaseModel):
    message: str = Field(max_length=2000)


class LabIn(BaseModel):
    lab: str


class RevealIn(BaseModel):
    lab: str
    step: str


def get_event(session: Session, event_id: int) -> Event:
    event = session.get(Event, event_id)
    if event is None:
        raise HTTPException(404, f"No event {event_id}.")
    return event


def get_attendee(session: Session, event: Event, attendee_id: int) -> Attendee:
    attendee = session.get(Attendee, attendee_id)
    if attendee is None or attendee.event_id != event.id:
        raise HTTPException(404, f"No attendee {attendee_id} in this event.")
    return attendee


def get_lab(ctx: AppContext, event: Event, lab_id: str) -> Lab:
    if lab_id not in event_labs(ctx, event):
        raise HTTPException(404, f"There is no lab {lab_id!r} in this event.")
    return ctx.catalog.labs[lab_id]


def get_step(lab: Lab, step_id: str) -> Step:
    step = lab.step(step_id)
    if step is None:
        raise HTTPException(404, f"Lab {lab.id!r} has no step {step_id!r}.")
    return step


def _bad(exc: EventError) -> HTTPException:
    return HTTPException(400, {"message": exc.message, "field": exc.field})


BAD: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorPublic, "description": "A field is wrong (``detail.field`` names it)"}
}


# -- events -----------------------------------------------------------------------------------------
@router.get("/events", response_model=list[EventPublic])
def list_events(session: SessionDep, me: Annotated[Acting, require(Action.view)]) -> list[EventPublic]:
    """The events I am on the staff of (self-paced ones excluded), newest first, with head counts."""
    seen = events_seen(me.principal.grants)
    return [e for e in event_admin.list_events(session) if seen is None or e.id in seen]


@router.post("/events", status_code=201, response_model=EventPublic, responses=BAD)
def create_event(
    body: EventIn, ctx: Ctx, session: SessionDep, _me: Annotated[Acting, require(Action.create_event)]
) -> EventPublic:
    """Create an event (a join code is generated when none is given)."""
    try:
        event = event_admin.create(ctx, session, **body.model_dump())
    except EventError as exc:
        raise _bad(exc) from exc
    return EventPublic.of(event)


@router.get("/events/{event_id}", response_model=EventPublic)
def show_event(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> EventPublic:
    """One event with its head count."""
    event = get_event(session, event_id)
    return EventPublic.of(event, event_admin.attendee_count(session, event_id))


@router.patch("/events/{event_id}", response_model=EventPublic, responses=BAD)
def edit_event(
    event_id: DbId,
    body: EventPatch,
    ctx: Ctx,
    session: SessionDep,
    me: Annotated[Acting, require(Action.edit)],
) -> EventPublic:
    """Change any of an event's fields (only those given)."""
    event = get_event(session, event_id)
    me.note(fields=",".join(sorted(body.model_dump(exclude_unset=True))))
    try:
        event = event_admin.update(ctx, session, event, **body.model_dump(exclude_unset=True))
    except EventError as exc:
        raise _bad(exc) from exc
    return EventPublic.of(event)


@router.get("/events/{event_id}/seats", response_model=SeatsPublic)
def seat_counts(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> SeatsPublic:
    """How many personal join codes the event has, and how many were used."""
    get_event(session, event_id)
    total, used = seats.counts(session, event_id)
    return SeatsPublic(total=total, used=used)


@router.post("/events/{event_id}/seats", response_model=SeatsPublic)
def make_seats(
    event_id: DbId, body: SeatsIn, session: SessionDep, me: Annotated[Acting, require(Action.edit)]
) -> SeatsPublic:
    """Make personal join codes (one attendee each); the codes are shown in this answer only."""
    event = get_event(session, event_id)
    codes = seats.issue(session, event, body.count)
    me.note(seats=body.count)
    total, used = seats.counts(session, event_id)
    return SeatsPublic(total=total, used=used, codes=codes)


@router.post("/events/{event_id}/status", response_model=EventPublic, responses=BAD)
def event_status(
    event_id: DbId, body: StatusIn, ctx: Ctx, session: SessionDep, me: Annotated[Acting, require(Action.edit)]
) -> EventPublic:
    """Open, close (no more joining) or archive an event."""
    event = get_event(session, event_id)
    try:
        event = event_admin.set_status(ctx, session, event, body.status)
        me.note(status=body.status)
    except EventError as exc:
        raise _bad(exc) from exc
    return EventPublic.of(event)


# -- the room ---------------------------------------------------------------------------------------
@router.get(
    "/events/{event_id}/progress", response_class=Response, responses=json_file(GridPublic, "The grid")
)
def progress_grid(
    event_id: DbId,
    request: Request,
    ctx: Ctx,
    session: SessionDep,
    _me: Annotated[Acting, require(Action.view)],
    attendee: DbIdQuery = None,
) -> Response:
    """The grid (compact, see :mod:`labserver.services.dashboard.room`); ``?attendee=`` for one row."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event, attendee_id=attendee)
    return _json(room.grid(facts, pick_lang(request)))


def _json(data: Any) -> Response:
    return Response(
        json.dumps(data, separators=(",", ":"), ensure_ascii=False), media_type="application/json"
    )


@router.get("/events/{event_id}/summary", response_model=SummaryPublic)
def summary(
    event_id: DbId, ctx: Ctx, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> SummaryPublic:
    """Per-step counts by status and the funnel (``reached``), plus the stuck list."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    return SummaryPublic.model_validate(
        {
            "steps": room.summaries(facts),
            "stuck": room.stuck_public(facts, room.stuck(ctx, facts)),
            "attendees": len(facts.attendees),
        }
    )


@router.get("/events/{event_id}/stuck", response_model=list[StuckPublic])
def stuck(
    event_id: DbId, ctx: Ctx, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> list[StuckPublic]:
    """Attendees who look stuck (slow on a step, or failing it again and again), longest first."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    return [StuckPublic.model_validate(row) for row in room.stuck_public(facts, room.stuck(ctx, facts))]


@router.get("/events/{event_id}/stream", response_class=EventSourceResponse, responses=SSE)
async def stream(
    event_id: DbId, ctx: Ctx, me: Annotated[Acting, require(Action.view)]
) -> EventSourceResponse:
    """SSE: ``ready``, then deltas: ``cell`` (one grid cell, same list as in ``cells``), ``run`` (a
    check started), ``env``, ``help``, ``announcement``, ``pace``, ``resync``, ...

    No request-scoped session here: it would hold a pooled connection for the stream's lifetime."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        event = get_event(session, event_id)
    sub = ctx.live.subscribe(event_id, kinds=GRID_KINDS, on_queued=prefetch(ctx, event))
    staff_stream = ctx.staff_watch.guard(me.principal, event_id, instructor_stream(ctx, event, sub))
    return EventSourceResponse(staff_stream, ping=15)


@router.get(
    "/events/{event_id}/export.csv",
    response_class=Response,
    responses=media("text/csv", "One row per attendee x step (see ExportRow)"),
)
def export_csv(
    event_id: DbId, ctx: Ctx, session: SessionDep, _me: Annotated[Acting, require(Action.export)]
) -> Response:
    """The results as CSV (one row per attendee x step), as a download."""
    event = get_event(session, event_id)
    body = room.export_csv(room.load_facts(ctx, session, event))
    name = f"labserver-{event.code}-{clock.now():%Y%m%d-%H%M}.csv"
    return Response(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get(
    "/events/{event_id}/export.json",
    response_class=Response,
    responses=json_file(ExportPublic, "The results"),
)
def export_json(
    event_id: DbId, ctx: Ctx, session: SessionDep, _me: Annotated[Acting, require(Action.export)]
) -> Response:
    """The event and its results as JSON, as a download."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    data = ExportPublic.model_validate(
        {"event": EventPublic.of(event, len(facts.attendees)), "results": room.export_rows(facts)}
    )
    name = f"labserver-{event.code}-{clock.now():%Y%m%d-%H%M}.json"
    return Response(
        json.dumps(data.model_dump(mode="json"), ensure_ascii=False, indent=1),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get(
    "/events/{event_id}/completion.svg",
    response_class=Response,
    responses=media("image/svg+xml", "Completion over time, as an SVG chart"),
)
def completion_svg(
    event_id: DbId,
    request: Request,
    ctx: Ctx,
    session: SessionDep,
    _me: Annotated[Acting, require(Action.view)],
    lab: str = "",
) -> Response:
    """How many attendees completed each step over time (``?lab=`` for one lab)."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    return Response(chart_svg(facts, lab or None, lang=pick_lang(request)), media_type="image/svg+xml")


@router.put("/events/{event_id}/pace", response_model=PacePublic)
def set_pace(
    event_id: DbId, body: PaceIn, ctx: Ctx, session: SessionDep, me: Annotated[Acting, require(Action.pace)]
) -> PacePublic:
    """Unlock a lab's steps up to N for the whole room (null: all)."""
    event = get_event(session, event_id)
    lab = get_lab(ctx, event, body.lab)
    event = room.set_pace(ctx, session, event=event, lab=lab, unlocked=body.unlocked)
    me.note(lab=lab.id, unlocked=body.unlocked)
    return PacePublic(pace=dict(event.pace))


@router.get("/events/{event_id}/announcements", response_model=list[AnnouncementPublic])
def list_announcements(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> list[AnnouncementPublic]:
    """The event's last 50 announcements, newest first."""
    get_event(session, event_id)
    return event_admin.announcements(session, event_id=event_id)


@router.post(
    "/events/{event_id}/announcements", status_code=201, response_model=AnnouncementPublic, responses=BAD
)
def announce(
    event_id: DbId,
    body: AnnouncementIn,
    me: Annotated[Acting, require(Action.broadcast)],
    ctx: Ctx,
    session: SessionDep,
) -> AnnouncementPublic:
    """Broadcast a message to every page of the event."""
    event = get_event(session, event_id)
    try:
        row = event_admin.broadcast(ctx, session, event=event, message=body.message, author=me.name)
    except EventError as exc:
        raise _bad(exc) from exc
    me.note(message=body.message)
    return AnnouncementPublic.of(row)


# -- help queue -------------------------------------------------------------------------------------
@router.get("/events/{event_id}/help", response_model=list[HelpQueueItem])
def help_queue(
    event_id: DbId, session: SessionDep, _me: Annotated[Acting, require(Action.view)]
) -> list[HelpQueueItem]:
    """Raised hands (open and claimed), oldest first, with waiting times."""
    get_event(session, event_id)
    return help.queue(session, event_id=event_id)


HELP_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorPublic},
    409: {"model": ErrorPublic, "description": "Already closed"},
}


def _help_action(
    action: str, event_id: int, help_id: int, me: Acting, ctx: Ctx, session: Session
) -> HelpPublic:
    get_event(session, event_id)
    fn = help.claim if action == "claim" else help.resolve
    try:
        h = fn(ctx, session, event_id=event_id, help_id=help_id, by=me.name)
    except LookupError as exc:
        raise HTTPException(404, f"No help request {help_id} in this event.") from exc
    except HelpError as exc:
        raise HTTPException(409, str(exc)) from exc
    me.note(hand=action)
    return HelpPublic.of(h)


@router.post("/events/{event_id}/help/{help_id}/claim", response_model=HelpPublic, responses=HELP_ERRORS)
def claim_help(
    event_id: DbId, help_id: DbId, me: Annotated[Acting, require(Action.help)], ctx: Ctx, session: SessionDep
) -> HelpPublic:
    """Take a raised hand ("someone is coming" reaches the attendee); a claimed one is taken over."""
    return _help_action("claim", event_id, help_id, me, ctx, session)


@router.post("/events/{event_id}/help/{help_id}/resolve", response_model=HelpPublic, responses=HELP_ERRORS)
def resolve_help(
    event_id: DbId, help_id: DbId, me: Annotated[Acting, require(Action.help)], ctx: Ctx, session: SessionDep
) -> HelpPublic:
    """Close a raised hand as helped."""
    return _help_action("resolve", event_id, help_id, me, ctx, session)


# -- one attendee -----------------------------------------------------------------------------------
@router.get("/events/{event_id}/attendees/{attendee_id}", response_model=AttendeeDetailPublic)
def attendee_detail(
    event_id: DbId,
    attendee_id: DbId,
    ctx: Ctx,
    session: SessionDep,
    _me: Annotated[Acting, require(Action.view)],
    lab: str = "",
) -> AttendeeDetailPublic:
    """Drill-down: environment, every check run with its full output (newest first; ``?lab=`` to
    narrow), open help requests and the stuck flag."""
    event = get_event(session, event_id)
    attendee = get_attendee(session, event, attendee_id)
    runs = checking.runs_of(session, attendee_id=attendee_id, lab_id=lab, limit=500)
    facts = room.load_facts(ctx, session, event)
    flags = room.stuck(ctx, facts)
    stuck_rows = room.stuck_public(facts, {attendee_id: flags[attendee_id]}) if attendee_id in flags else []
    return AttendeeDetailPublic(
        attendee=AttendeeInfo(id=attendee.id, name=attendee.name, joined_at=attendee.created_at.isoformat()),
        environment=EnvironmentPublic.of(get_row(session, attendee)),
        runs=[CheckRunPublic.of(r) for r in runs],
        help=[HelpPublic.of(h) for h in help.of_attendee(session, attendee_id=attendee_id)],
        stuck=[StuckPublic.model_validate(row) for row in stuck_rows],
        cells=room.attendee_cells(facts, attendee_id, facts.columns),
    )


def _env_owner(session: Session, env_id: str) -> tuple[Event, Attendee]:
    row = session.get(Environment, env_id)
    if row is None:
        raise HTTPException(404, f"No environment {env_id}.")
    event = get_event(session, row.event_id)
    return event, get_attendee(session, event, row.attendee_id)


@router.post("/environments/{env_id}/reset", response_model=ResetPublic)
async def env_reset(
    env_id: str, body: LabIn, ctx: Ctx, session: SessionDep, me: Annotated[Acting, require(Action.reset)]
) -> ResetPublic:
    """Reset one lab folder of an attendee's environment to its starter (the old files are kept)."""
    event, attendee = _env_owner(session, env_id)
    lab = get_lab(ctx, event, body.lab)
    backup = await reset_lab(ctx, session, event=event, attendee=attendee, lab_id=lab.id)
    me.note(lab=lab.id)
    return ResetPublic(lab=lab.id, backup=backup)


@router.post("/environments/{env_id}/restart", response_model=EnvironmentPublic)
async def env_restart(
    env_id: str, ctx: Ctx, session: SessionDep, me: Annotated[Acting, require(Action.reset)]
) -> EnvironmentPublic:
    """Close the attendee's shells and start the environment again, workspace kept."""
    event, attendee = _env_owner(session, env_id)
    await env_admin.restart(ctx, session, event=event, attendee=attendee)
    me.note(kind="restart")
    return EnvironmentPublic.of(get_row(session, attendee))


@router.post("/environments/{env_id}/recreate", response_model=EnvironmentPublic)
async def env_recreate(
    env_id: str, ctx: Ctx, session: SessionDep, me: Annotated[Acting, require(Action.reset)]
) -> EnvironmentPublic:
    """Destroy the environment, workspace included, and make a fresh one from the starters."""
    event, attendee = _env_owner(session, env_id)
    await env_admin.recreate(ctx, session, event=event, attendee=attendee)
    me.note(kind="recreate")
    return EnvironmentPublic.of(get_row(session, attendee))


@router.post(
    "/events/{event_id}/stop-all",
    response_model=StopAllPublic,
    responses={409: {"model": ErrorPublic, "description": "The backend cannot stop environments"}},
)
async def stop_all(
    event_id: DbId, ctx: Ctx, me: Annotated[Acting, require(Action.stop_all)]
) -> StopAllPublic:
    """Stop every environment of the event (workspaces kept); each restarts on its attendee's next action."""
    with Session(ctx.engine) as session:  # closed before the backend works
        get_event(session, event_id)
    try:
        stopped, failed = await env_admin.stop_all(ctx, event_id=event_id)
    except env_admin.NotStoppable as exc:
        raise HTTPException(409, str(exc)) from exc
    me.target = "every environment"
    me.note(stopped=len(stopped), failed=len(failed))
    return StopAllPublic(stopped=stopped, failed=failed)


@router.post("/events/{event_id}/attendees/{attendee_id}/reveal", response_model=RevealPublic)
async def reveal(
    event_id: DbId,
    attendee_id: DbId,
    body: RevealIn,
    me: Annotated[Acting, require(Action.reveal)],
    ctx: Ctx,
    session: SessionDep,
) -> RevealPublic:
    """Copy a step's solution files into the attendee's ``<lab>/.solution/``."""
    event = get_event(session, event_id)
    attendee = get_attendee(session, event, attendee_id)
    lab = get_lab(ctx, event, body.lab)
    step = get_step(lab, body.step)
    files = await env_admin.reveal(
        ctx, session, event=event, attendee=attendee, lab=lab, step=step, by=me.name
    )
    me.note(lab=lab.id, step=step.id, files=len(files))
    return RevealPublic(files=files)
