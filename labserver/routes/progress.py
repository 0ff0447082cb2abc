"""Progress files over the attendee API: bring progress made at home (self-paced) into the room, and
take it home again. Both act on the caller's own attendee only.

- ``GET  /api/v1/progress/export?files=1`` -> the progress file (JSON attachment)
- ``POST /api/v1/progress/import?files=1`` body = a progress file -> what was imported
  (400 with ``{"detail", "code": "bad-progress-file"}`` and nothing changed when the file is bad;
  403 ``"unsigned-progress-file"`` on an event server for a file it did not sign for me)
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse

from labserver.edge.body_limit import IMPORT_MAX
from labserver.routes.deps import Ctx, CurrentAttendee, SessionDep
from labserver.schemas import ErrorPublic, ImportReportPublic, json_file
from labserver.services.reporting import progress_io

router = APIRouter(prefix="/api/v1/progress", tags=["attendee"])

MAX_IMPORT_BYTES = IMPORT_MAX  # body_limit.py refuses more before it is read


@router.get(
    "/export",
    response_class=Response,
    responses=json_file(progress_io.ProgressFile, "The progress file (an attachment)"),
)
async def api_export(me: CurrentAttendee, ctx: Ctx, session: SessionDep, files: bool = False) -> Response:
    """Download my progress (``?files=1``: with the lab files that differ from the starter)."""
    skipped: list[str] = []
    progress = await progress_io.export_progress(
        ctx, session, event=me.event, attendee=me.attendee, with_files=files, skipped_files=skipped
    )
    headers = {"Content-Disposition": 'attachment; filename="labserver-progress.json"'}
    if skipped:
        headers["X-Labserver-Skipped-Files"] = str(len(skipped))
    return Response(progress_io.dump_progress(progress), media_type="application/json", headers=headers)


@router.post(
    "/import",
    response_model=ImportReportPublic,
    responses={400: {"model": ErrorPublic}, 403: {"model": ErrorPublic}, 413: {"model": ErrorPublic}},
)
async def api_import(
    request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep, files: bool = True
) -> ImportReportPublic | JSONResponse:
    """Add the passed steps of a progress file (the body) to mine; nothing changes when it is bad."""
    body = await request.body()
    if len(body) > MAX_IMPORT_BYTES:
        raise HTTPException(413, "That progress file is too big to upload here.")
    try:
        progress = progress_io.parse_progress(body)
    except progress_io.ProgressFileError as exc:
        return JSONResponse({"detail": str(exc), "code": "bad-progress-file"}, status_code=400)
    try:
        report = await progress_io.import_progress(
            ctx, session, event=me.event, attendee=me.attendee, progress=progress, restore_files=files
        )
    except progress_io.ProgressSignatureError as exc:
        return JSONResponse({"detail": str(exc), "code": "unsigned-progress-file"}, status_code=403)
    return ImportReportPublic.model_validate(report.as_dict())
