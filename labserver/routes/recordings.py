"""Terminal recordings over HTTP: an attendee's own (``/api/v1/recordings``), an instructor's view
of one attendee's (``/api/v1/events/{event}/attendees/{attendee}/recordings``), and the event's
export with them (``export.zip``). Who may see what is decided in
:mod:`labserver.services.support.recordings` (an attendee's folder is computed from the attendee, never
from the request); a recording id that is not in that folder is a 404 like any unknown one."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from fastapi.responses import FileResponse
from starlette.background import BackgroundTask

from labserver import clock
from labserver.db import release
from labserver.routes.deps import Ctx, CurrentAttendee, DbId, SessionDep, require
from labserver.routes.instructor.api import get_attendee, get_event
from labserver.schemas import EventPublic, ExportPublic, RecordingPublic, media
from labserver.services.dashboard import room
from labserver.services.staff import audit
from labserver.services.staff.roles import Action
from labserver.services.support import recordings

router = APIRouter(prefix="/api/v1")
RecId = Annotated[str, Path(max_length=120, description="A recording id (from the list)")]
CAST = media(recordings.MEDIA_TYPE, "An asciicast v2 recording (one JSON header line, then events)")
ZIP = media("application/zip", "results.csv, results.json and, when asked, recordings/<attendee>/*.cast")


def _file(rec: recordings.RecordingFile | None, download: bool) -> FileResponse:
    if rec is None:
        raise HTTPException(404, "No such recording: it may have been deleted with the environment.")
    return FileResponse(
        rec.path,
        media_type=recordings.MEDIA_TYPE,
        filename=recordings.download_name(rec),
        content_disposition_type="attachment" if download else "inline",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


# -- the attendee's own ----------------------------------------------------------------------------
@router.get("/recordings", response_model=list[RecordingPublic], tags=["attendee"])
def my_recordings(me: CurrentAttendee, ctx: Ctx) -> list[RecordingPublic]:
    """My terminal recordings, newest first."""
    rows = recordings.of_attendee(ctx, event_id=me.event.id or 0, attendee_id=me.id)
    return [RecordingPublic.of(r, "/api/v1/recordings") for r in rows]


@router.get("/recordings/{rec_id}", response_class=FileResponse, responses=CAST, tags=["attendee"])
def my_recording(rec_id: RecId, me: CurrentAttendee, ctx: Ctx, download: bool = False) -> FileResponse:
    """One of my recordings (asciicast v2); ``download=1`` saves it as a file."""
    rec = recordings.find(ctx, event_id=me.event.id or 0, attendee_id=me.id, rec_id=rec_id)
    return _file(rec, download)


# -- the instructor's view of one attendee -------------------------------------------------------------
instructor = APIRouter(prefix="/api/v1", tags=["instructor"])


@instructor.get(
    "/events/{event_id}/attendees/{attendee_id}/recordings",
    response_model=list[RecordingPublic],
    dependencies=[require(Action.terminal_view)],
)
def attendee_recordings(
    event_id: DbId, attendee_id: DbId, ctx: Ctx, session: SessionDep
) -> list[RecordingPublic]:
    """The attendee's terminal recordings, newest first."""
    get_attendee(session, get_event(session, event_id), attendee_id)
    release(session)
    rows = recordings.of_attendee(ctx, event_id=event_id, attendee_id=attendee_id)
    base = f"/api/v1/events/{event_id}/attendees/{attendee_id}/recordings"
    return [RecordingPublic.of(r, base) for r in rows]


@instructor.get(
    "/events/{event_id}/attendees/{attendee_id}/recordings/{rec_id}",
    response_class=FileResponse,
    responses=CAST,
    dependencies=[require(Action.terminal_view)],
)
def attendee_recording(
    event_id: DbId, attendee_id: DbId, rec_id: RecId, ctx: Ctx, session: SessionDep, download: bool = False
) -> FileResponse:
    """One recording of the attendee (asciicast v2); ``download=1`` saves it as a file."""
    get_attendee(session, get_event(session, event_id), attendee_id)
    release(session)
    rec = recordings.find(ctx, event_id=event_id, attendee_id=attendee_id, rec_id=rec_id)
    return _file(rec, download)


@instructor.get(
    "/events/{event_id}/export.zip",
    response_class=FileResponse,
    responses=ZIP,
    dependencies=[require(Action.export)],
)
def export_zip(
    event_id: DbId, ctx: Ctx, session: SessionDep, include_recordings: bool = False
) -> FileResponse:
    """The results (CSV and JSON) as one zip; ``include_recordings=1`` adds every terminal recording."""
    event = get_event(session, event_id)
    facts = room.load_facts(ctx, session, event)
    audit_csv = audit.export_csv(audit.of_event(session, event_id, limit=None))
    release(session)
    data = ExportPublic.model_validate(
        {"event": EventPublic.of(event, len(facts.attendees)), "results": room.export_rows(facts)}
    )
    files = {
        "results.csv": room.export_csv(facts),
        "results.json": json.dumps(data.model_dump(mode="json"), ensure_ascii=False, indent=1),
        "audit.csv": audit_csv,
    }
    tmp = recordings.export_zip(
        ctx,
        event_id=event_id,
        attendees=list(facts.attendees),
        files=files,
        with_recordings=include_recordings,
    )
    name = f"labserver-{event.code}-{clock.now():%Y%m%d-%H%M}.zip"
    return FileResponse(
        tmp, media_type="application/zip", filename=name, background=BackgroundTask(tmp.unlink)
    )
