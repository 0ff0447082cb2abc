"""Instructor pages under ``/instructor`` (Jinja2, the attendee pages' environment factory
:func:`labserver.routes.pages.jinja_env`). Each page's context is built by one function
(``events_context``, ``event_form_context``, ``dashboard_context``, ``attendee_context``) that tests
call directly. After loading, the dashboard and the drill-down talk to the instructor JSON API.

Anonymous users and attendees are redirected to the sign-in page (303, :mod:`.signin`); a staff
member whose role does not allow a page gets 403 (:func:`~labserver.routes.deps.require`). Each
person signs in as themselves, so several work at once and the help queue shows who claimed what."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from labserver.models import EventStatus
from labserver.routes.deps import Ctx, DbId, SessionDep, require
from labserver.routes.instructor.api import get_attendee, get_event
from labserver.routes.pages import base_context, render_page
from labserver.schemas import EnvironmentPublic, EventPublic
from labserver.services.context import AppContext
from labserver.services.joining import event_admin, seats
from labserver.services.joining.event_admin import EventError
from labserver.services.provisioning.environments import event_labs, get_row
from labserver.services.reporting import completion
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action, allowed, events_seen, may

router = APIRouter(prefix="/instructor", include_in_schema=False, tags=["instructor-pages"])

Context = dict[str, Any]


#: a staff page's right (:func:`~labserver.routes.deps.require` with ``page=True``: anyone not signed
#: in is sent to the sign-in page, a role without the right gets 403)
ViewPage = Annotated[Acting, require(Action.view, page=True)]
EditPage = Annotated[Acting, require(Action.edit, page=True)]
EditFormPage = Annotated[Acting, require(Action.edit, page=True, audit=False)]  # only shows the form
CreatePage = Annotated[Acting, require(Action.create_event, page=True)]


def instructor_base(request: Request, me: Acting | None, page: str) -> Context:
    """What every staff page's template reads: who is signed in and what they may do here (the
    pages offer only the buttons of ``perms``; the routes refuse the rest anyway)."""
    base = base_context(request, None, page)
    perms = allowed(me.principal.grants, me.event_id) if me is not None else []
    return {**base, "instructor": me.name if me is not None else None, "perms": perms}


# -- events -----------------------------------------------------------------------------------------
def _catalog_labs(ctx: AppContext, lang: str) -> list[Context]:
    return [
        {"id": lab.id, "title": lab.spec.title.get(lang), "steps": len(lab.steps)}
        for lab in sorted(ctx.catalog.labs.values(), key=lambda lab: (getattr(lab.spec, "order", 0), lab.id))
    ]


def events_context(request: Request, ctx: AppContext, session: Session, me: Acting) -> Context:
    base = instructor_base(request, me, "instructor-events")
    seen = events_seen(me.principal.grants)
    grants = me.principal.grants
    events = [
        {**e.model_dump(), "edit": may(grants, Action.edit, e.id)}
        for e in event_admin.list_events(session)
        if seen is None or e.id in seen
    ]
    return {
        **base,
        "events": events,
        "statuses": [s.value for s in EventStatus],
        "can_create": may(grants, Action.create_event, None),
    }


def _local(t: dt.datetime | None) -> str:
    return t.strftime("%Y-%m-%dT%H:%M") if t else ""


def event_form_context(
    request: Request,
    ctx: AppContext,
    me: Acting,
    values: Context | None = None,
    error: EventError | None = None,
    event_id: int | None = None,
) -> Context:
    base = instructor_base(request, me, "instructor-event-form")
    values = values or {}
    return {
        **base,
        "event_id": event_id,
        "values": {
            "title": values.get("title", ""),
            "labs": values.get("labs", []),
            "code": values.get("code", ""),
            "capacity": values.get("capacity", 0),
            "starts_at": values.get("starts_at", ""),
            "ends_at": values.get("ends_at", ""),
            "backend": values.get("backend", ""),
            "image": values.get("image", ""),
        },
        "catalog": _catalog_labs(ctx, base["lang"]),
        "backends": list(event_admin.BACKENDS),
        "error": {"message": error.message, "field": error.field} if error else None,
    }


def _parse_time(value: str, field: str) -> dt.datetime | None:
    if not value.strip():
        return None
    try:
        t = dt.datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise EventError("Use a date and time like 2026-05-20T09:00.", field=field) from exc
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _form_fields(
    title: str, labs: str, code: str, capacity: str, starts_at: str, ends_at: str, backend: str, image: str
) -> Context:
    try:
        cap = int(capacity or 0)
    except ValueError as exc:
        raise EventError("Capacity is a whole number (0 = unlimited).", field="capacity") from exc
    return {
        "title": title,
        "labs": [lab.strip() for lab in labs.replace(",", "\n").splitlines() if lab.strip()],
        "code": code,
        "capacity": cap,
        "starts_at": _parse_time(starts_at, "starts_at"),
        "ends_at": _parse_time(ends_at, "ends_at"),
        "backend": backend,
        "image": image,
    }


FormStr = Annotated[str, Form()]


@router.get("")
def events_page(request: Request, ctx: Ctx, session: SessionDep, me: ViewPage) -> HTMLResponse:
    """Every event, with status buttons."""
    return render_page(ctx, "instructor_events.html", events_context(request, ctx, session, me))


@router.get("/events/new")
def new_event_page(request: Request, ctx: Ctx, me: CreatePage) -> HTMLResponse:
    """The form for a new event."""
    return render_page(ctx, "instructor_event_form.html", event_form_context(request, ctx, me))


@router.post("/events")
def create_event(
    request: Request,
    ctx: Ctx,
    session: SessionDep,
    me: CreatePage,
    title: FormStr = "",
    labs: FormStr = "",
    code: FormStr = "",
    capacity: FormStr = "0",
    starts_at: FormStr = "",
    ends_at: FormStr = "",
    backend: FormStr = "",
    image: FormStr = "",
) -> Response:
    """Create an event from the form (the form again, with the error, when a field is wrong)."""
    raw = {"title": title, "labs": labs, "code": code, "capacity": capacity}
    raw |= {"starts_at": starts_at, "ends_at": ends_at, "backend": backend, "image": image}
    try:
        event = event_admin.create(ctx, session, **_form_fields(**raw))
    except EventError as exc:
        raw["labs"] = [lab for lab in labs.replace(",", "\n").splitlines() if lab.strip()]  # type: ignore[assignment]
        context = event_form_context(request, ctx, me, raw, exc)
        return render_page(ctx, "instructor_event_form.html", context, status_code=400)
    return RedirectResponse(f"/instructor/events/{event.id}", status_code=303)


@router.get("/events/{event_id}/edit")
def edit_event_page(
    event_id: DbId, request: Request, ctx: Ctx, session: SessionDep, me: EditFormPage
) -> HTMLResponse:
    """The form of an existing event."""
    event = get_event(session, event_id)
    values: Context = EventPublic.of(event).model_dump()
    values["starts_at"], values["ends_at"] = _local(event.starts_at), _local(event.ends_at)
    return render_page(
        ctx, "instructor_event_form.html", event_form_context(request, ctx, me, values, event_id=event_id)
    )


@router.post("/events/{event_id}/edit")
def edit_event(
    event_id: DbId,
    request: Request,
    ctx: Ctx,
    session: SessionDep,
    me: EditPage,
    title: FormStr = "",
    labs: FormStr = "",
    code: FormStr = "",
    capacity: FormStr = "0",
    starts_at: FormStr = "",
    ends_at: FormStr = "",
    backend: FormStr = "",
    image: FormStr = "",
) -> Response:
    """Save the event form."""
    event = get_event(session, event_id)
    raw = {"title": title, "labs": labs, "code": code, "capacity": capacity}
    raw |= {"starts_at": starts_at, "ends_at": ends_at, "backend": backend, "image": image}
    me.note(fields="the event form")
    try:
        event_admin.update(ctx, session, event, **_form_fields(**raw))
    except EventError as exc:
        session.rollback()
        me.skip = True  # nothing changed: no audit line
        raw["labs"] = [lab for lab in labs.replace(",", "\n").splitlines() if lab.strip()]  # type: ignore[assignment]
        context = event_form_context(request, ctx, me, raw, exc, event_id=event_id)
        return render_page(ctx, "instructor_event_form.html", context, status_code=400)
    return RedirectResponse(f"/instructor/events/{event_id}", status_code=303)


@router.post("/events/{event_id}/status")
def event_status(
    event_id: DbId, ctx: Ctx, session: SessionDep, me: EditPage, status: FormStr = ""
) -> Response:
    """Open, close or archive an event from the events page."""
    event = get_event(session, event_id)
    try:
        event_admin.set_status(ctx, session, event, status)
    except EventError as exc:
        raise HTTPException(400, exc.message) from exc
    me.note(status=status)
    target = "/instructor" if status == EventStatus.archived else f"/instructor/events/{event_id}"
    return RedirectResponse(target, status_code=303)


# -- the room ---------------------------------------------------------------------------------------
def dashboard_context(
    request: Request, ctx: AppContext, session: Session, me: Acting, event_id: int
) -> Context:
    base = instructor_base(request, me, "instructor-dashboard")
    event = get_event(session, event_id)
    lang = base["lang"]
    labs = []
    for lab_id in event_labs(ctx, event):
        lab = ctx.catalog.labs[lab_id]
        labs.append(
            {
                "id": lab.id,
                "title": lab.spec.title.get(lang),
                "steps": [{"id": s.id, "title": s.spec.title.get(lang)} for s in lab.steps],
                "unlocked": event.pace.get(lab.id),
            }
        )
    count = event_admin.attendee_count(session, event_id)
    seats_total, seats_used = seats.counts(session, event_id)
    return {
        **base,
        "ev": EventPublic.of(event, count).model_dump(),
        "seats_total": seats_total,
        "seats_used": seats_used,
        "labs": labs,
        "completion_key": completion.public_key(event, ctx.settings.ensure_secret_key()).model_dump(),
        "config": {"event": event.id, "lang": lang, "me": me.name, "perms": base["perms"]},
    }


@router.get("/events/{event_id}")
def dashboard_page(
    event_id: DbId, request: Request, ctx: Ctx, session: SessionDep, me: ViewPage
) -> HTMLResponse:
    """The live room: grid, stuck list, help queue, pacing, broadcast."""
    return render_page(
        ctx, "instructor_dashboard.html", dashboard_context(request, ctx, session, me, event_id)
    )


def attendee_context(
    request: Request, ctx: AppContext, session: Session, me: Acting, event_id: int, attendee_id: int
) -> Context:
    base = instructor_base(request, me, "instructor-attendee")
    event = get_event(session, event_id)
    attendee = get_attendee(session, event, attendee_id)
    lang = base["lang"]
    labs = [
        {
            "id": lab_id,
            "title": ctx.catalog.labs[lab_id].spec.title.get(lang),
            "steps": [{"id": s.id, "title": s.spec.title.get(lang)} for s in ctx.catalog.labs[lab_id].steps],
        }
        for lab_id in event_labs(ctx, event)
    ]
    env = EnvironmentPublic.of(get_row(session, attendee)).model_dump(exclude_none=True)
    return {
        **base,
        "ev": EventPublic.of(event).model_dump(),
        "attendee": {"id": attendee.id, "name": attendee.name},
        "env": env,
        "labs": labs,
        "config": {
            "event": event.id,
            "attendee": attendee.id,
            "env_id": env.get("id"),
            "labs": [lab["id"] for lab in labs],
            "lang": lang,
            "perms": base["perms"],
        },
    }


@router.get("/events/{event_id}/attendees/{attendee_id}")
def attendee_page(
    event_id: DbId, attendee_id: DbId, request: Request, ctx: Ctx, session: SessionDep, me: ViewPage
) -> HTMLResponse:
    """One attendee: environment, runs, read-only terminal view."""
    context = attendee_context(request, ctx, session, me, event_id, attendee_id)
    return render_page(ctx, "instructor_attendee.html", context)
