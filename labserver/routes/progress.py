"""Progress files over the attendee API: bring progress made at home (self-paced) into the room, and
take it home again. Both act on the caller's own attendee only.

- ``GET  /api/v1/progress/export?files=1`` -> the progress file (JSON attachment)
- ``POST /api/v1/progress/import?files=1`` body = a progress file -> what was imported
  (400 with ``{"detail", "code": "bad-progress-file"}`` and nothing changed when the file is bad)
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse

from labserver.routes.deps import Ctx, CurrentAttendee, SessionDep
from labserver.services import progress_io

router = APIRouter(prefix="/api/v1/progress", tags=["attendee"])

MAX_IMPORT_BYTES = 200 * 1024 * 1024


@router.get("/export")
async def api_export(me: CurrentAttendee, ctx: Ctx, session: SessionDep, files: bool = False) -> Response:
    skipped: list[str] = []
    progress = await progress_io.export_progress(
        ctx, session, event=me.event, attendee=me.attendee, with_files=files, skipped_files=skipped
    )
    headers = {"Content-Disposition": 'attachment; filename="labserver-progress.json"'}
    if skipped:
        headers["X-Labserver-Skipped-Files"] = str(len(skipped))
    return Response(progress_io.dump_progress(progress), media_type="application/json", headers=headers)


@router.post("/import")
async def api_import(
    request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep, files: bool = True
) -> Any:
    body = await request.body()
    if len(body) > MAX_IMPORT_BYTES:
        raise HTTPException(413, "That progress file is too big to upload here.")
    try:
        progress = progress_io.parse_progress(body)
    except progress_io.ProgressFileError as exc:
        return JSONResponse({"detail": str(exc), "code": "bad-progress-file"}, status_code=400)
    report = await progress_io.import_progress(
        ctx, session, event=me.event, attendee=me.attendee, progress=progress, restore_files=files
    )
    return report.as_dict()
