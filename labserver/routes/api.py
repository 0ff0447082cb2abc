"""Attendee JSON API under ``/api/v1``. Every route acts on the caller's own attendee only: there
is no attendee id in any path, so one attendee can never name another's environment or results."""

from __future__ import annotations

import mimetypes

from anyio import from_thread
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlmodel import Session
from sse_starlette.sse import EventSourceResponse

from labserver.backends.base import EnvRef, PathRefused, safe_relpath
from labserver.backends.local import join_refusal
from labserver.content import Lab, Step
from labserver.db import release
from labserver.i18n import gettext, pick_lang
from labserver.routes.deps import (
    ATTENDEE_COOKIE,
    Ctx,
    CurrentAttendee,
    Me,
    SessionDep,
    resolve_in_own_session,
    token_from,
)
from labserver.schemas import (
    SSE,
    AnnouncementPublic,
    AttendeeRef,
    CheckRunPublic,
    ConflictPublic,
    EnvironmentPublic,
    ErrorPublic,
    EventRef,
    FilePublic,
    HelpPublic,
    JoinPublic,
    LabDetailPublic,
    LabListItem,
    LabProgressPublic,
    LabSummaryPublic,
    MePublic,
    ResetPublic,
    SavedPublic,
    StatusPublic,
    StepPublic,
    UnavailableLab,
    media,
)
from labserver.services.dashboard import pacing
from labserver.services.grading import checking
from labserver.services.joining import event_admin
from labserver.services.joining.events import JoinError, join
from labserver.services.provisioning import environments, files
from labserver.services.reporting import progress
from labserver.services.support import help

router = APIRouter(prefix="/api/v1", tags=["attendee"])

MAX_EDIT_BYTES = 2 * 1024 * 1024


class JoinIn(BaseModel):
    event_code: str = Field(max_length=64)
    name: str = Field(max_length=200)


class HelpIn(BaseModel):
    lab: str = ""
    step: str = ""
    note: str = Field(default="", max_length=1000)


def attendee_lab(ctx: Ctx, me: Me, lab_id: str) -> Lab:
    lab = ctx.catalog.get(lab_id)
    if lab is None or lab_id not in environments.event_labs(ctx, me.event):
        broken = ctx.catalog.broken.get(lab_id)
        if broken is not None:
            raise HTTPException(
                503,
                f"Lab {lab_id!r} is unavailable: its files have problems "
                f"({broken.problems[0] if broken.problems else 'unknown'}). Tell the instructor.",
            )
        raise HTTPException(404, f"There is no lab {lab_id!r} in this event.")
    return lab


def lab_step(lab: Lab, step_id: str) -> Step:
    step = lab.step(step_id)
    if step is None:
        raise HTTPException(404, f"Lab {lab.id!r} has no step {step_id!r}.")
    return step


def _progress(session: Session, me: Me, lab: Lab) -> LabProgressPublic:
    prog = progress.lab_progress(session, event=me.event, attendee_id=me.id, lab=lab)
    return LabProgressPublic.model_validate(prog.as_dict())


@router.post(
    "/join", response_model=JoinPublic, responses={400: {"model": ErrorPublic}, 403: {"model": ErrorPublic}}
)
def api_join(
    body: JoinIn, request: Request, response: Response, ctx: Ctx, session: SessionDep
) -> JoinPublic | JSONResponse:
    """Join an event by its code with a display name; the token comes back and as a cookie."""
    lang = pick_lang(request)
    refusal = join_refusal(ctx.backend, request.client.host if request.client else None)
    if refusal:  # a local backend that cannot isolate attendees admits only this machine's
        return JSONResponse({"detail": refusal, "code": "unsandboxed"}, status_code=403)
    try:
        attendee, token, event = join(session, event_code=body.event_code, name=body.name, lang=lang)
    except JoinError as exc:
        return JSONResponse({"detail": gettext(lang, exc.message), "code": exc.code}, status_code=400)
    assert attendee.id is not None
    ctx.join_watch.record(  # services/joining/join_watch.py: what the instructor's join list shows
        ctx.settings.ensure_secret_key(),
        attendee_id=attendee.id,
        user_agent=request.headers.get("user-agent", ""),
        address=request.client.host if request.client else None,
    )
    release(session)
    # provisioning begins now, in the background: joining never waits for an environment
    from_thread.run_sync(lambda: environments.start_in_background(ctx, event=event, attendee=attendee))
    response.set_cookie(ATTENDEE_COOKIE, token, httponly=True, samesite="lax", max_age=30 * 24 * 3600)
    return JoinPublic(
        attendee=AttendeeRef(id=attendee.id, name=attendee.name),
        event=EventRef(id=event.id, title=event.title, code=event.code),
        token=token,
    )


@router.get("/me", response_model=MePublic)
def api_me(me: CurrentAttendee) -> MePublic:
    """Who I am and which event I joined."""
    return MePublic.of(me.attendee, me.event)


@router.get("/labs", response_model=list[LabListItem | UnavailableLab])
def api_labs(
    request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> list[LabListItem | UnavailableLab]:
    """The event's labs with my progress; labs whose files are broken are listed as unavailable."""
    lang = pick_lang(request)
    out: list[LabListItem | UnavailableLab] = []
    for lab_id in environments.event_labs(ctx, me.event):
        lab = ctx.catalog.labs[lab_id]
        summary = LabSummaryPublic.of(lab, lang)
        out.append(LabListItem(**summary.model_dump(), progress=_progress(session, me, lab)))
    for lab_id in me.event.labs or list(ctx.catalog.broken):
        if lab_id in ctx.catalog.broken:
            problems = ctx.catalog.broken[lab_id].problems
            out.append(UnavailableLab(id=lab_id, title=lab_id, problem=str(problems[0]) if problems else ""))
    return out


@router.get("/labs/{lab_id}", response_model=LabDetailPublic)
def api_lab(
    lab_id: str, request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> LabDetailPublic:
    """One lab: its steps (instructions rendered, locked ones empty) and my progress."""
    lang = pick_lang(request)
    lab = attendee_lab(ctx, me, lab_id)
    steps = [StepPublic.of(lab, s, lang, pacing.is_locked(me.event, lab, s.index)) for s in lab.steps]
    summary = LabSummaryPublic.of(lab, lang).model_dump(exclude={"steps"})
    return LabDetailPublic(**summary, steps=steps, progress=_progress(session, me, lab))


@router.post("/labs/{lab_id}/steps/{step_id}/open", response_model=StatusPublic)
def api_open_step(
    lab_id: str, step_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> StatusPublic:
    """Record that I opened a step (time on step starts then)."""
    lab = attendee_lab(ctx, me, lab_id)
    lab_step(lab, step_id)
    progress.open_step(ctx, session, event=me.event, attendee_id=me.id, lab_id=lab_id, step_id=step_id)
    return StatusPublic(status="ok")


@router.get("/environment", response_model=EnvironmentPublic, response_model_exclude_none=True)
def api_env(me: CurrentAttendee, session: SessionDep) -> EnvironmentPublic:
    """My environment's state (``none`` before it is first made)."""
    return EnvironmentPublic.of(environments.get_row(session, me.attendee))


@router.post("/environment", response_model=EnvironmentPublic, response_model_exclude_none=True)
async def api_env_start(me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> EnvironmentPublic:
    """Start my environment now (progress and state changes arrive on my stream)."""
    await environments.start_environment(ctx, session, event=me.event, attendee=me.attendee)
    return EnvironmentPublic.of(environments.get_row(session, me.attendee))


def _lab_path(lab: Lab, path: str) -> str:
    rel = safe_relpath(path)
    if not rel:
        raise PathRefused(path)
    return f"{lab.id}/{rel}"


@router.get("/labs/{lab_id}/files", response_model=list[FilePublic])
async def api_files(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> list[FilePublic]:
    """Every file and folder of the lab folder in my environment (paths relative to it)."""
    lab = attendee_lab(ctx, me, lab_id)

    async def listing(ref: EnvRef) -> list[FilePublic]:
        prefix = lab.id + "/"
        return [
            FilePublic(path=e.path.removeprefix(prefix), dir=e.is_dir, size=e.size, mtime=e.mtime)
            for e in await ctx.backend.list_files(ref, lab.id)
        ]

    return await environments.with_environment(
        ctx, session, event=me.event, attendee=me.attendee, action=listing
    )


TEXT_SUFFIXES = (
    ".py",
    ".sh",
    ".md",
    ".yaml",
    ".yml",
    ".json",
    ".txt",
    ".patch",
    ".toml",
    ".cfg",
    ".ini",
    ".csv",
)


@router.get(
    "/labs/{lab_id}/files/{path:path}",
    response_class=Response,
    responses=media("application/octet-stream", "The file's bytes (text files as text/plain; ETag header)"),
)
async def api_read_file(
    lab_id: str, path: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> Response:
    """One file of the lab folder, as bytes, with its ETag for a later conditional save."""
    lab = attendee_lab(ctx, me, lab_id)
    target = _lab_path(lab, path)

    async def read(ref: EnvRef) -> bytes:
        return await ctx.backend.read_file(ref, target)

    data = await environments.with_environment(
        ctx, session, event=me.event, attendee=me.attendee, action=read
    )
    media_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if media_type.startswith("text/") or path.endswith(TEXT_SUFFIXES):
        media_type = "text/plain; charset=utf-8"
    return Response(
        data, media_type=media_type, headers={"ETag": f'"{files.etag(data)}"', "Cache-Control": "no-store"}
    )


@router.put(
    "/labs/{lab_id}/files/{path:path}",
    response_model=SavedPublic,
    responses={409: {"model": ConflictPublic}, 413: {"model": ErrorPublic}},
)
async def api_write_file(
    lab_id: str,
    path: str,
    request: Request,
    response: Response,
    me: CurrentAttendee,
    ctx: Ctx,
    session: SessionDep,
) -> SavedPublic | JSONResponse:
    """Save a file (body = its bytes); with ``If-Match`` it is refused (409) when it changed on disk."""
    lab = attendee_lab(ctx, me, lab_id)
    data = await request.body()
    lang = pick_lang(request)
    if len(data) > MAX_EDIT_BYTES:
        raise HTTPException(
            413,
            gettext(lang, "That file is too big to save from the editor (2 MB at most); use the terminal."),
        )
    target = _lab_path(lab, path)
    if_match = request.headers.get("if-match", "")

    async def save(ref: EnvRef) -> str | None:
        """None when saved, else the ETag of the newer file on disk (services/provisioning/files.py)."""
        try:
            await files.save(ctx, ref, target, data, if_match=if_match)
        except files.Conflict as conflict:
            return conflict.etag
        return None

    newer = await environments.with_environment(
        ctx, session, event=me.event, attendee=me.attendee, action=save
    )
    if newer is not None:
        conflict = ConflictPublic(
            detail=gettext(
                lang,
                "This file changed on disk since you opened it (in the terminal?). "
                "Your text is still in the editor: copy it, reload the file, and merge.",
            ),
            etag=newer,
        )
        return JSONResponse(conflict.model_dump(), status_code=409)
    response.headers["ETag"] = f'"{files.etag(data)}"'
    return SavedPublic(etag=files.etag(data), size=len(data))


@router.post(
    "/labs/{lab_id}/steps/{step_id}/check",
    response_model=CheckRunPublic,
    responses={423: {"model": ErrorPublic}},
)
async def api_check(
    lab_id: str, step_id: str, request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> CheckRunPublic:
    """Run the step's checker against my environment; the result is committed before it is returned."""
    lab = attendee_lab(ctx, me, lab_id)
    step = lab_step(lab, step_id)
    if pacing.is_locked(me.event, lab, step.index):
        raise HTTPException(
            423, gettext(pick_lang(request), "This step is not open yet: the instructor will unlock it.")
        )
    run = await checking.run_check(
        ctx, session, event=me.event, attendee=me.attendee, lab=lab, step=step, lang=pick_lang(request)
    )
    return CheckRunPublic.of(run)


@router.get("/labs/{lab_id}/steps/{step_id}/runs", response_model=list[CheckRunPublic])
def api_runs(
    lab_id: str, step_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> list[CheckRunPublic]:
    """My last 50 check runs of a step, newest first."""
    lab = attendee_lab(ctx, me, lab_id)
    lab_step(lab, step_id)
    runs = checking.runs_of(session, attendee_id=me.id, lab_id=lab_id, step_id=step_id, limit=50)
    return [CheckRunPublic.of(r) for r in runs]


@router.post("/labs/{lab_id}/reset", response_model=ResetPublic)
async def api_reset(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> ResetPublic:
    """Put the lab folder back to its starter; my old files go to a dated backup folder."""
    lab = attendee_lab(ctx, me, lab_id)
    backup = await environments.reset_lab(ctx, session, event=me.event, attendee=me.attendee, lab_id=lab.id)
    return ResetPublic(lab=lab.id, backup=backup)


@router.get(
    "/labs/{lab_id}/download",
    response_class=Response,
    responses=media("application/zip", "A zip of the lab folder"),
)
async def api_download(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> Response:
    """Download my lab folder as a zip."""
    lab = attendee_lab(ctx, me, lab_id)

    async def zipped(ref: EnvRef) -> bytes:
        return await ctx.backend.archive(ref, lab.id)

    data = await environments.with_environment(
        ctx, session, event=me.event, attendee=me.attendee, action=zipped
    )
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{lab.id}.zip"'},
    )


@router.post("/help", response_model=HelpPublic)
def api_help(body: HelpIn, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> HelpPublic:
    """Raise my hand (again: updates the open request; one per attendee)."""
    h = help.raise_hand(ctx, session, attendee=me.attendee, lab=body.lab, step=body.step, note=body.note)
    return HelpPublic.of(h)


@router.get("/help", response_model=HelpPublic | None)
def api_my_help(me: CurrentAttendee, session: SessionDep) -> HelpPublic | None:
    """My open or claimed request, or null."""
    h = help.active_of(session, attendee_id=me.id)
    return HelpPublic.of(h) if h else None


@router.delete("/help", response_model=StatusPublic)
def api_cancel_help(me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> StatusPublic:
    """Lower my hand."""
    help.cancel(ctx, session, attendee=me.attendee)
    return StatusPublic(status="cancelled")


@router.get("/announcements", response_model=list[AnnouncementPublic])
def api_announcements(me: CurrentAttendee, session: SessionDep) -> list[AnnouncementPublic]:
    """The event's last 20 announcements, newest first."""
    return event_admin.announcements(session, event_id=me.event.id or 0, limit=20)


@router.get("/stream", response_class=EventSourceResponse, responses=SSE)
async def api_stream(request: Request, ctx: Ctx) -> EventSourceResponse:
    """My live events (SSE). The token is resolved in a short session of its own: a stream stays
    open for hours and must not hold a database connection (the pool would run dry at ~15 pages)."""
    me = await run_in_threadpool(resolve_in_own_session, ctx, token_from(request.headers, request.cookies))
    if me is None:
        raise HTTPException(401, "Join an event first: your attendee token is missing or unknown.")
    sub = ctx.live.subscribe(me.event.id or 0, me.id)
    return EventSourceResponse(ctx.live.stream(sub), ping=15)
