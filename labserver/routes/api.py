"""Attendee JSON API under ``/api/v1``. Every route acts on the caller's own attendee only: there
is no attendee id in any path, so one attendee can never name another's environment or results."""

from __future__ import annotations

import hashlib
import mimetypes
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlmodel import Session, col, select
from sse_starlette.sse import EventSourceResponse

from labserver.backends.base import PathRefused, safe_relpath
from labserver.backends.local import join_refusal
from labserver.content import Lab, Step
from labserver.content.markdown import render
from labserver.i18n import gettext, pick_lang
from labserver.models import Announcement, CheckRun, Environment, HelpRequest, HelpState
from labserver.routes.deps import (
    ATTENDEE_COOKIE,
    Ctx,
    CurrentAttendee,
    Me,
    SessionDep,
    resolve_attendee,
    token_from,
)
from labserver.services import checking, environments, progress
from labserver.services.events import JoinError, join
from labserver.services.help import ACTIVE as ACTIVE_HELP

router = APIRouter(prefix="/api/v1", tags=["attendee"])

MAX_EDIT_BYTES = 2 * 1024 * 1024


class JoinIn(BaseModel):
    event_code: str = Field(max_length=64)
    name: str = Field(max_length=200)


class HelpIn(BaseModel):
    lab: str = ""
    step: str = ""
    note: str = Field(default="", max_length=1000)


def _lab(ctx: Ctx, me: Me, lab_id: str) -> Lab:
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


def _step(lab: Lab, step_id: str) -> Step:
    step = lab.step(step_id)
    if step is None:
        raise HTTPException(404, f"Lab {lab.id!r} has no step {step_id!r}.")
    return step


def lab_summary(lab: Lab, lang: str) -> dict[str, Any]:
    spec = lab.spec
    return {
        "id": lab.id,
        "title": spec.title.get(lang),
        "summary": spec.summary.get(lang),
        "duration_min": spec.duration_min,
        "device": spec.requires.device,
        "talk": {"title": spec.talk.title.get(lang), "speaker": spec.talk.speaker} if spec.talk else None,
        "steps": len(lab.steps),
    }


def step_detail(lab: Lab, step: Step, lang: str, locked: bool) -> dict[str, Any]:
    return {
        "id": step.id,
        "index": step.index + 1,
        "title": step.spec.title.get(lang),
        "locked": locked,
        "hints": [h.get(lang) for h in step.spec.hints],
        "html": ""
        if locked
        else render(
            step.instructions(lang),
            asset_base=f"/labs/{lab.id}/assets",
            run_label=gettext(lang, "Run in terminal"),
        ),
    }


@router.post("/join")
def api_join(body: JoinIn, request: Request, ctx: Ctx, session: SessionDep) -> JSONResponse:
    lang = pick_lang(request)
    refusal = join_refusal(ctx.backend, request.client.host if request.client else None)
    if refusal:  # a local backend that cannot isolate attendees admits only this machine's
        return JSONResponse({"detail": refusal, "code": "unsandboxed"}, status_code=403)
    try:
        attendee, token, event = join(session, event_code=body.event_code, name=body.name, lang=lang)
    except JoinError as exc:
        return JSONResponse({"detail": gettext(lang, exc.message), "code": exc.code}, status_code=400)
    resp = JSONResponse(
        {
            "attendee": {"id": attendee.id, "name": attendee.name},
            "event": {"id": event.id, "title": event.title, "code": event.code},
            "token": token,
        }
    )
    resp.set_cookie(ATTENDEE_COOKIE, token, httponly=True, samesite="lax", max_age=30 * 24 * 3600)
    return resp


@router.get("/me")
def api_me(me: CurrentAttendee) -> dict[str, Any]:
    return {
        "attendee": {"id": me.attendee.id, "name": me.attendee.name},
        "event": {"id": me.event.id, "title": me.event.title, "code": me.event.code},
    }


@router.get("/labs")
def api_labs(request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> list[dict[str, Any]]:
    lang = pick_lang(request)
    out = []
    for lab_id in environments.event_labs(ctx, me.event):
        lab = ctx.catalog.labs[lab_id]
        prog = progress.lab_progress(session, event=me.event, attendee_id=me.id, lab=lab)
        out.append({**lab_summary(lab, lang), "available": True, "progress": prog.as_dict()})
    for lab_id in me.event.labs or list(ctx.catalog.broken):
        if lab_id in ctx.catalog.broken:
            out.append(
                {
                    "id": lab_id,
                    "title": lab_id,
                    "available": False,
                    "problem": str(ctx.catalog.broken[lab_id].problems[0])
                    if ctx.catalog.broken[lab_id].problems
                    else "",
                }
            )
    return out


@router.get("/labs/{lab_id}")
def api_lab(
    lab_id: str, request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> dict[str, Any]:
    lang = pick_lang(request)
    lab = _lab(ctx, me, lab_id)
    prog = progress.lab_progress(session, event=me.event, attendee_id=me.id, lab=lab)
    steps = [step_detail(lab, s, lang, progress.is_locked(me.event, lab, s.index)) for s in lab.steps]
    return {**lab_summary(lab, lang), "steps": steps, "progress": prog.as_dict()}


@router.post("/labs/{lab_id}/steps/{step_id}/open")
def api_open_step(
    lab_id: str, step_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> dict[str, str]:
    lab = _lab(ctx, me, lab_id)
    _step(lab, step_id)
    progress.mark_step_started(session, attendee_id=me.id, lab_id=lab_id, step_id=step_id)
    ctx.live.publish("step.opened", me.event.id or 0, me.id, lab=lab_id, step=step_id)
    return {"status": "ok"}


def env_public(row: Environment | None) -> dict[str, Any]:
    if row is None:
        return {"state": "none", "message": ""}
    return {
        "id": row.id,
        "state": row.state,
        "message": row.message,
        "reason": row.reason,
        "node": row.node,
        "device": row.device,
        "backend": row.backend,
    }


@router.get("/environment")
def api_env(me: CurrentAttendee, session: SessionDep) -> dict[str, Any]:
    return env_public(environments.get_row(session, me.attendee))


@router.post("/environment")
async def api_env_start(me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    await environments.ensure_environment(ctx, session, event=me.event, attendee=me.attendee)
    return env_public(environments.get_row(session, me.attendee))


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def _lab_path(lab: Lab, path: str) -> str:
    rel = safe_relpath(path)
    if not rel:
        raise PathRefused(path)
    return f"{lab.id}/{rel}"


@router.get("/labs/{lab_id}/files")
async def api_files(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> list[dict[str, Any]]:
    lab = _lab(ctx, me, lab_id)
    ref = await environments.ensure_environment(ctx, session, event=me.event, attendee=me.attendee)
    entries = await ctx.backend.list_files(ref, lab.id)
    prefix = lab.id + "/"
    return [
        {"path": e.path.removeprefix(prefix), "dir": e.is_dir, "size": e.size, "mtime": e.mtime}
        for e in entries
    ]


@router.get("/labs/{lab_id}/files/{path:path}")
async def api_read_file(
    lab_id: str, path: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> Response:
    lab = _lab(ctx, me, lab_id)
    ref = await environments.ensure_environment(ctx, session, event=me.event, attendee=me.attendee)
    data = await ctx.backend.read_file(ref, _lab_path(lab, path))
    media = mimetypes.guess_type(path)[0] or "application/octet-stream"
    if media.startswith("text/") or path.endswith(
        (".py", ".sh", ".md", ".yaml", ".yml", ".json", ".txt", ".patch", ".toml", ".cfg", ".ini", ".csv")
    ):
        media = "text/plain; charset=utf-8"
    return Response(data, media_type=media, headers={"ETag": f'"{_etag(data)}"', "Cache-Control": "no-store"})


@router.put("/labs/{lab_id}/files/{path:path}")
async def api_write_file(
    lab_id: str, path: str, request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> Response:
    lab = _lab(ctx, me, lab_id)
    data = await request.body()
    if len(data) > MAX_EDIT_BYTES:
        raise HTTPException(
            413,
            gettext(
                pick_lang(request),
                "That file is too big to save from the editor (2 MB at most); use the terminal.",
            ),
        )
    ref = await environments.ensure_environment(ctx, session, event=me.event, attendee=me.attendee)
    target = _lab_path(lab, path)
    if_match = request.headers.get("if-match", "").strip('"')
    if if_match and if_match != "*":
        try:
            current = await ctx.backend.read_file(ref, target)
        except FileNotFoundError:
            current = None
        if current is not None and _etag(current) != if_match:
            return JSONResponse(
                {
                    "detail": gettext(
                        pick_lang(request),
                        "This file changed on disk since you opened it (in the terminal?). "
                        "Your text is still in the editor: copy it, reload the file, and merge.",
                    ),
                    "code": "conflict",
                    "etag": _etag(current),
                },
                status_code=409,
            )
    await ctx.backend.write_file(ref, target, data)
    return JSONResponse(
        {"status": "saved", "etag": _etag(data), "size": len(data)}, headers={"ETag": f'"{_etag(data)}"'}
    )


@router.post("/labs/{lab_id}/steps/{step_id}/check")
async def api_check(
    lab_id: str, step_id: str, request: Request, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> dict[str, Any]:
    lab = _lab(ctx, me, lab_id)
    step = _step(lab, step_id)
    if progress.is_locked(me.event, lab, step.index):
        raise HTTPException(
            423, gettext(pick_lang(request), "This step is not open yet: the instructor will unlock it.")
        )
    run = await checking.run_check(
        ctx, session, event=me.event, attendee=me.attendee, lab=lab, step=step, lang=pick_lang(request)
    )
    return checking.run_public(run)


@router.get("/labs/{lab_id}/steps/{step_id}/runs")
def api_runs(
    lab_id: str, step_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep
) -> list[dict[str, Any]]:
    lab = _lab(ctx, me, lab_id)
    _step(lab, step_id)
    runs = session.exec(
        select(CheckRun)
        .where(CheckRun.attendee_id == me.id, CheckRun.lab_id == lab_id, CheckRun.step_id == step_id)
        .order_by(col(CheckRun.id).desc())
        .limit(50)
    ).all()
    return [checking.run_public(r) for r in runs]


@router.post("/labs/{lab_id}/reset")
async def api_reset(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> dict[str, str]:
    lab = _lab(ctx, me, lab_id)
    backup = await environments.reset_lab(ctx, session, event=me.event, attendee=me.attendee, lab_id=lab.id)
    return {"status": "reset", "backup": backup}


@router.get("/labs/{lab_id}/download")
async def api_download(lab_id: str, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> Response:
    lab = _lab(ctx, me, lab_id)
    ref = await environments.ensure_environment(ctx, session, event=me.event, attendee=me.attendee)
    data = await ctx.backend.archive(ref, lab.id)
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{lab.id}.zip"'},
    )


@router.post("/help")
def api_help(body: HelpIn, me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> dict[str, Any]:
    existing = session.exec(
        select(HelpRequest).where(
            HelpRequest.attendee_id == me.id,
            HelpRequest.state.in_(  # type: ignore[attr-defined]
                ACTIVE_HELP
            ),
        )
    ).first()
    if existing is None:
        existing = HelpRequest(
            event_id=me.event.id or 0, attendee_id=me.id, lab_id=body.lab, step_id=body.step, note=body.note
        )
    else:
        existing.note, existing.lab_id, existing.step_id = body.note or existing.note, body.lab, body.step
    session.add(existing)
    session.commit()
    session.refresh(existing)
    ctx.live.publish(
        "help.raised",
        me.event.id or 0,
        me.id,
        help_id=existing.id,
        name=me.attendee.name,
        lab=body.lab,
        step=body.step,
        note=body.note,
    )
    return help_public(existing)


def help_public(h: HelpRequest) -> dict[str, Any]:
    return {
        "id": h.id,
        "state": h.state,
        "lab": h.lab_id,
        "step": h.step_id,
        "note": h.note,
        "claimed_by": h.claimed_by,
        "created_at": h.created_at.isoformat(),
    }


@router.get("/help")
def api_my_help(me: CurrentAttendee, session: SessionDep) -> dict[str, Any] | None:
    h = session.exec(
        select(HelpRequest)
        .where(
            HelpRequest.attendee_id == me.id,
            HelpRequest.state.in_(  # type: ignore[attr-defined]
                ACTIVE_HELP
            ),
        )
        .order_by(col(HelpRequest.id).desc())
    ).first()  # type: ignore[union-attr]
    return help_public(h) if h else None


@router.delete("/help")
def api_cancel_help(me: CurrentAttendee, ctx: Ctx, session: SessionDep) -> dict[str, str]:
    for h in session.exec(
        select(HelpRequest).where(
            HelpRequest.attendee_id == me.id,
            HelpRequest.state.in_(  # type: ignore[attr-defined]
                ACTIVE_HELP
            ),
        )
    ).all():
        h.state = HelpState.cancelled
        session.add(h)
        ctx.live.publish("help.cancelled", me.event.id or 0, me.id, help_id=h.id)
    session.commit()
    return {"status": "cancelled"}


@router.get("/announcements")
def api_announcements(me: CurrentAttendee, session: SessionDep) -> list[dict[str, Any]]:
    rows = session.exec(
        select(Announcement)
        .where(Announcement.event_id == me.event.id)
        .order_by(col(Announcement.id).desc())
        .limit(20)
    ).all()  # type: ignore[union-attr]
    return [{"id": a.id, "message": a.message, "created_at": a.created_at.isoformat()} for a in rows]


@router.get("/stream")
async def api_stream(request: Request, ctx: Ctx) -> EventSourceResponse:
    """My live events (SSE). The token is resolved in a short session of its own: a stream stays
    open for hours and must not hold a database connection (the pool would run dry at ~15 pages)."""
    with Session(ctx.engine, expire_on_commit=False) as session:
        me = resolve_attendee(session, token_from(request.headers, request.cookies))
    if me is None:
        raise HTTPException(401, "Join an event first: your attendee token is missing or unknown.")
    sub = ctx.live.subscribe(me.event.id or 0, me.id)
    return EventSourceResponse(ctx.live.stream(sub), ping=15)
