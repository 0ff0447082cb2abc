"""Instructor JSON API under ``/api/v1`` (tag ``instructor``). Every route depends on
:func:`~labserver.routes.deps.current_instructor` at the router level, so an attendee token or no
credentials get 403. Routes are thin: parse, call a ``services`` function, shape the answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from pydantic import BaseModel, Field
from sqlmodel import Session, col, select
from sse_starlette.sse import EventSourceResponse

from labserver import clock
from labserver.content import Lab, Step
from labserver.i18n import pick_lang
from labserver.models import Attendee, CheckRun, Environment, Event, HelpRequest
from labserver.routes.deps import Ctx, Instructor, SessionDep, current_instructor
from labserver.routes.instructor_stream import instructor_stream
from labserver.services import env_admin, event_admin, help, room
from labserver.services.checking import run_public
from labserver.services.context import AppContext
from labserver.services.environments import event_labs, get_row, reset_lab
from labserver.services.event_admin import EventError
from labserver.services.help import HelpError

router = APIRouter(prefix="/api/v1", tags=["instructor"], dependencies=[Depends(current_instructor)])


class EventIn(BaseModel):
    title: str = Field(max_length=200)
    labs: list[str] = Field(default_factory=list)
    code: str = Field(default="", max_length=64)
    capacity: int = 0
    starts_at: dt.datetime | None = None
    ends_at: dt.datetime | None = None
    backend: str = ""
    image: str = Field(default="", max_length=200)


class EventPatch(BaseModel):
    title: str | None = Field(default=None, max_length=200)
    labs: list[str] | None = None
    code: str | None = Field(default=None, max_length=64)
    capacity: int | None = None
    starts_at: dt.datetime | None = None
    ends_at: dt.datetime | None = None
    backend: str | None = None
    image: str | None = Field(default=None, max_length=200)


class StatusIn(BaseModel):
    status: str


class PaceIn(BaseModel):
    lab: str
    unlocked: int | None = Field(default=None, ge=0)  # None: every step open


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


# -- events -----------------------------------------------------------------------------------------
@router.get("/events")
def list_events(session: SessionDep) -> list[dict[str, Any]]:
    return event_admin.list_events(session)


@router.post("/events", status_code=201)
def create_event(body: EventIn, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    try:
        event = event_admin.create(ctx, session, **body.model_dump())
    except EventError as exc:
        raise _bad(exc) from exc
    return event_admin.event_public(event)


@router.get("/events/{event_id}")
def show_event(event_id: int, session: SessionDep) -> dict[str, Any]:
    event = get_event(session, event_id)
    count = len(session.exec(select(Attendee.id).where(Attendee.event_id == event_id)).all())
    return event_admin.event_public(event, count)


@router.patch("/events/{event_id}")
def edit_event(event_id: int, body: EventPatch, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    event = get_event(session, event_id)
    try:
        event = event_admin.update(ctx, session, event, **body.model_dump(exclude_unset=True))
    except EventError as exc:
        raise _bad(exc) from exc
    return event_admin.event_public(event)


@router.post("/events/{event_id}/status")
def event_status(event_id: int, body: StatusIn, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    event = get_event(session, event_id)
    try:
        event = event_admin.set_status(ctx, session, event, body.status)
    except EventError as exc:
        raise _bad(exc) from exc
    return event_admin.event_public(event)


# -- the room ---------------------------------------------------------------------------------------
@router.get("/events/{event_id}/progress")
def progress_grid(
    event_id: int, request: Request, ctx: Ctx, session: SessionDep, attendee: int | None = None
) -> Response:
    """The grid (compact, see :mod:`labserver.services.room`); ``?attendee=`` for one row."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event, attendee_id=attendee)
    return _json(room.grid(facts, pick_lang(request)))


def _json(data: Any) -> Response:
    import json

    return Response(
        json.dumps(data, separators=(",", ":"), ensure_ascii=False), media_type="application/json"
    )


@router.get("/events/{event_id}/summary")
def summary(event_id: int, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    """Per-step counts by status and the funnel (``reached``), plus the stuck list."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    return {
        "steps": room.summaries(facts),
        "stuck": room.stuck_public(facts, room.stuck(ctx, facts)),
        "attendees": len(facts.attendees),
    }


@router.get("/events/{event_id}/stuck")
def stuck(event_id: int, ctx: Ctx, session: SessionDep) -> list[dict[str, Any]]:
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    return room.stuck_public(facts, room.stuck(ctx, facts))


@router.get("/events/{event_id}/stream")
async def stream(event_id: int, ctx: Ctx) -> EventSourceResponse:
    """SSE: ``ready``, then deltas: ``cell`` (one grid cell, same list as in ``cells``), ``run`` (a
    check started), ``env``, ``help``, ``announcement``, ``pace``, ``resync``, ...

    No request-scoped session here: it would hold a pooled connection for the stream's lifetime."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        event = get_event(session, event_id)
    sub = ctx.live.subscribe(event_id)
    return EventSourceResponse(instructor_stream(ctx, event, sub), ping=15)


@router.get("/events/{event_id}/export.csv")
def export_csv(event_id: int, ctx: Ctx, session: SessionDep) -> Response:
    event = get_event(session, event_id)
    body = room.export_csv(room.load_facts(ctx, session, event))
    name = f"labserver-{event.code}-{clock.now():%Y%m%d-%H%M}.csv"
    return Response(
        body,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/events/{event_id}/export.json")
def export_json(event_id: int, ctx: Ctx, session: SessionDep) -> Response:
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    data = {
        "event": event_admin.event_public(event, len(facts.attendees)),
        "results": room.export_rows(facts),
    }
    import json

    name = f"labserver-{event.code}-{clock.now():%Y%m%d-%H%M}.json"
    return Response(
        json.dumps(data, ensure_ascii=False, indent=1),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/events/{event_id}/completion.svg")
def completion_svg(event_id: int, request: Request, ctx: Ctx, session: SessionDep, lab: str = "") -> Response:
    from labserver.services.completion_chart import chart_svg

    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    return Response(chart_svg(facts, lab or None, lang=pick_lang(request)), media_type="image/svg+xml")


@router.put("/events/{event_id}/pace")
def set_pace(event_id: int, body: PaceIn, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    event = get_event(session, event_id)
    lab = get_lab(ctx, event, body.lab)
    event = room.set_pace(ctx, session, event=event, lab=lab, unlocked=body.unlocked)
    return {"pace": event.pace}


@router.get("/events/{event_id}/announcements")
def list_announcements(event_id: int, session: SessionDep) -> list[dict[str, Any]]:
    get_event(session, event_id)
    return event_admin.announcements(session, event_id=event_id)


@router.post("/events/{event_id}/announcements", status_code=201)
def announce(
    event_id: int, body: AnnouncementIn, me: Instructor, ctx: Ctx, session: SessionDep
) -> dict[str, Any]:
    event = get_event(session, event_id)
    try:
        row = event_admin.broadcast(ctx, session, event=event, message=body.message, author=me)
    except EventError as exc:
        raise _bad(exc) from exc
    return {"id": row.id, "message": row.message, "author": row.author}


# -- help queue -------------------------------------------------------------------------------------
@router.get("/events/{event_id}/help")
def help_queue(event_id: int, session: SessionDep) -> list[dict[str, Any]]:
    get_event(session, event_id)
    return help.queue(session, event_id=event_id)


def _help_action(action: str, event_id: int, help_id: int, me: str, ctx: Ctx, session: Session) -> dict:
    get_event(session, event_id)
    fn = help.claim if action == "claim" else help.resolve
    try:
        h = fn(ctx, session, event_id=event_id, help_id=help_id, by=me)
    except LookupError as exc:
        raise HTTPException(404, f"No help request {help_id} in this event.") from exc
    except HelpError as exc:
        raise HTTPException(409, str(exc)) from exc
    return {"id": h.id, "state": h.state, "claimed_by": h.claimed_by}


@router.post("/events/{event_id}/help/{help_id}/claim")
def claim_help(event_id: int, help_id: int, me: Instructor, ctx: Ctx, session: SessionDep) -> dict:
    return _help_action("claim", event_id, help_id, me, ctx, session)


@router.post("/events/{event_id}/help/{help_id}/resolve")
def resolve_help(event_id: int, help_id: int, me: Instructor, ctx: Ctx, session: SessionDep) -> dict:
    return _help_action("resolve", event_id, help_id, me, ctx, session)


# -- one attendee -----------------------------------------------------------------------------------
@router.get("/events/{event_id}/attendees/{attendee_id}")
def attendee_detail(
    event_id: int, attendee_id: int, ctx: Ctx, session: SessionDep, lab: str = ""
) -> dict[str, Any]:
    """Drill-down: environment, every check run with its full output (newest first; ``?lab=`` to
    narrow), open help requests and the stuck flag."""
    event = get_event(session, event_id)
    attendee = get_attendee(session, event, attendee_id)
    q = select(CheckRun).where(CheckRun.attendee_id == attendee_id).order_by(col(CheckRun.id).desc())
    if lab:
        q = q.where(CheckRun.lab_id == lab)
    runs = [run_public(r) for r in session.exec(q.limit(500)).all()]
    helps = session.exec(
        select(HelpRequest).where(HelpRequest.attendee_id == attendee_id).order_by(col(HelpRequest.id).desc())
    ).all()
    facts = room.load_facts(ctx, session, event)
    flags = room.stuck(ctx, facts)
    return {
        "attendee": {"id": attendee.id, "name": attendee.name, "joined_at": attendee.created_at.isoformat()},
        "environment": env_admin.env_detail(get_row(session, attendee)),
        "runs": runs,
        "help": [
            {"id": h.id, "state": h.state, "lab": h.lab_id, "step": h.step_id, "note": h.note} for h in helps
        ],
        "stuck": room.stuck_public(facts, {attendee_id: flags[attendee_id]}) if attendee_id in flags else [],
        "cells": room.attendee_cells(facts, attendee_id, facts.columns),
    }


def _env_owner(session: Session, env_id: str) -> tuple[Event, Attendee]:
    row = session.get(Environment, env_id)
    if row is None:
        raise HTTPException(404, f"No environment {env_id}.")
    event = get_event(session, row.event_id)
    return event, get_attendee(session, event, row.attendee_id)


@router.post("/environments/{env_id}/reset")
async def env_reset(env_id: str, body: LabIn, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    event, attendee = _env_owner(session, env_id)
    lab = get_lab(ctx, event, body.lab)
    backup = await reset_lab(ctx, session, event=event, attendee=attendee, lab_id=lab.id)
    return {"status": "reset", "lab": lab.id, "backup": backup}


@router.post("/environments/{env_id}/restart")
async def env_restart(env_id: str, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    event, attendee = _env_owner(session, env_id)
    await env_admin.restart(ctx, session, event=event, attendee=attendee)
    return env_admin.env_detail(get_row(session, attendee))


@router.post("/environments/{env_id}/recreate")
async def env_recreate(env_id: str, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    event, attendee = _env_owner(session, env_id)
    await env_admin.recreate(ctx, session, event=event, attendee=attendee)
    return env_admin.env_detail(get_row(session, attendee))


@router.post("/events/{event_id}/attendees/{attendee_id}/reveal")
async def reveal(
    event_id: int, attendee_id: int, body: RevealIn, me: Instructor, ctx: Ctx, session: SessionDep
) -> dict[str, Any]:
    event = get_event(session, event_id)
    attendee = get_attendee(session, event, attendee_id)
    lab = get_lab(ctx, event, body.lab)
    step = get_step(lab, body.step)
    files = await env_admin.reveal(ctx, session, event=event, attendee=attendee, lab=lab, step=step, by=me)
    return {"status": "revealed", "files": files}
