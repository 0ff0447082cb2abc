"""The attendee's side of the post-event report and of verifiable completion (acting on the caller's
own attendee only: no route here takes an attendee id).

- ``POST /api/v1/labs/{lab}/steps/{step}/hints``: I opened this step's hints (services/reporting/hints.py)
- ``GET  /api/v1/labs/{lab}/completion``: my signed completion record of a lab I finished (an
  attachment), 409 ``lab-not-finished`` when a step has not passed (services/reporting/completion.py)
- ``GET  /api/v1/completion-key``: the public key that signs my event's records
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import JSONResponse

from labserver.routes.api import attendee_lab, lab_step
from labserver.routes.deps import Ctx, CurrentAttendee, SessionDep
from labserver.schemas import (
    CompletionKeyPublic,
    CompletionRecordPublic,
    ErrorPublic,
    HintsOpenedPublic,
    json_file,
)
from labserver.services.dashboard import pacing
from labserver.services.reporting import completion, hints

router = APIRouter(prefix="/api/v1", tags=["attendee"])


@router.post(
    "/labs/{lab_id}/steps/{step_id}/hints",
    response_model=HintsOpenedPublic,
    responses={409: {"model": ErrorPublic}},
)
def api_hints_opened(
    lab_id: str, step_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> HintsOpenedPublic:
    """Record that I opened a step's hints (the first time counts)."""
    lab = attendee_lab(ctx, me, lab_id)
    step = lab_step(lab, step_id)
    if pacing.is_locked(me.event, lab, step.index):
        raise HTTPException(409, "This step is not open yet: the instructor will unlock it.")
    first = hints.open_hints(
        session, event_id=me.event.id or 0, attendee_id=me.id, lab_id=lab.id, step_id=step.id
    )
    return HintsOpenedPublic(first=first)


@router.get(
    "/labs/{lab_id}/completion",
    response_class=Response,
    responses={
        **json_file(CompletionRecordPublic, "My signed completion record (an attachment, docs/report.md)"),
        409: {"model": ErrorPublic},
    },
)
def api_completion(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> Response:
    """Download my signed completion record of a lab I finished."""
    lab = attendee_lab(ctx, me, lab_id)
    try:
        doc = completion.build_record(
            session, event=me.event, attendee=me.attendee, lab=lab, secret=ctx.settings.ensure_secret_key()
        )
    except completion.CompletionRefused as exc:
        return JSONResponse({"detail": str(exc), "code": "lab-not-finished"}, status_code=409)
    name = f"completion-{me.event.code}-{lab.id}.json"
    return Response(
        completion.dump_record(doc),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.get("/completion-key", response_model=CompletionKeyPublic)
def api_completion_key(me: CurrentAttendee, ctx: Ctx) -> CompletionKeyPublic:
    """The public key that signs my event's completion records."""
    return completion.public_key(me.event, ctx.settings.ensure_secret_key())
