"""Terminal WebSockets. Frames: server → browser binary (PTY output bytes, never decoded), and to
a viewer that may type one text frame ``{"ready": true}`` once the shell reads its input (after
its first prompt; at once on a re-attach); browser → server binary (keystrokes) or text JSON
control (``{"resize": [cols, rows]}``). Keystrokes sent before "ready" are held by the session and
reach the shell after its prompt, never echoed before it.

The shell lives in :class:`~labserver.terminals.sessions.TerminalHub`, not in the socket: a reconnect
re-attaches to the same shell and first replays recent output."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session
from starlette.types import Message
from starlette.websockets import WebSocketState

from labserver.backends.base import BackendError, EnvRef
from labserver.i18n import gettext
from labserver.live import Kind, LiveEvent
from labserver.models import Environment
from labserver.routes.deps import Me, authorize_ws, resolve_in_own_session, token_from
from labserver.services.context import AppContext
from labserver.services.provisioning import environments
from labserver.services.staff import audit
from labserver.services.staff.roles import Action
from labserver.services.staff.watch import Held
from labserver.services.support import help_share
from labserver.terminals.sessions import RESYNC, TerminalSession
from labserver.terminals.sharing import Share

router = APIRouter(prefix="/api/v1", tags=["terminal"])

READY = json.dumps({"ready": True})
#: sent before the scrollback to a viewer whose backlog was dropped (terminals.py, Viewer)
SKIPPED = b"\r\n\x1b[33m[output skipped: this connection was too slow to follow the shell]\x1b[0m\r\n"


async def bridge(
    ws: WebSocket,
    session: TerminalSession,
    *,
    readonly: bool,
    early: Sequence[Message] = (),
    reading: asyncio.Future[Message] | None = None,
    share: Share | None = None,
    on_typed: Callable[[], None] | None = None,
) -> None:
    """Pump the shell's output to the socket and the socket's frames to the shell; ``early`` are
    frames that arrived while the environment was starting (handled first, in order), ``reading``
    a read of the socket already under way then (awaited first: cancelling it could lose a frame).
    With ``share`` (someone besides the attendee types, with their consent) every frame is checked
    against it before it is written, ``on_typed`` is called for each keystroke frame, and the
    socket is closed (4403, "sharing ended") the moment the share ends."""
    queue, scrollback = session.attach()
    ended: asyncio.Future[Any] | None = asyncio.ensure_future(share.ended.wait()) if share else None
    try:
        if scrollback:
            await ws.send_bytes(scrollback)

        async def pump_out() -> None:
            told = readonly  # a read-only view types nothing: it needs no "ready"
            while True:
                if not told and session.ready.is_set() and not session.closed:  # after the prompt
                    await ws.send_text(READY)
                    told = True
                data = await queue.get()
                if not data:
                    await ws.close(code=1000, reason="shell exited")
                    return
                if data is RESYNC:  # this viewer fell behind: its backlog was dropped
                    data = SKIPPED + bytes(session.scrollback)
                await ws.send_bytes(data)

        def may_type() -> bool:
            return not readonly and (share is None or share.may_type())

        async def frame(msg: Message) -> None:
            typing = may_type()
            await handle_frame(session, msg, readonly=not typing)
            if typing and on_typed is not None and _is_input(msg):
                on_typed()

        for msg in early:
            if msg["type"] == "websocket.disconnect":
                return
            await frame(msg)
        out_task = asyncio.ensure_future(pump_out())
        try:
            while True:
                recv = reading or asyncio.ensure_future(ws.receive())
                reading = None
                waits: set[asyncio.Future[Any]] = {recv, out_task}
                if ended is not None:
                    waits.add(ended)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if out_task in done:
                    recv.cancel()
                    return
                if ended is not None and ended in done:
                    recv.cancel()
                    await ws.close(code=4403, reason="sharing ended")
                    return
                msg = recv.result()
                if msg["type"] == "websocket.disconnect":
                    return
                await frame(msg)
        finally:
            out_task.cancel()
    except WebSocketDisconnect:
        pass
    finally:
        if ended is not None:
            ended.cancel()
        session.detach(queue)
        if ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(Exception):
                await ws.close()


def _is_input(msg: Message) -> bool:
    """Whether a frame is keystrokes (not a resize)."""
    if msg.get("bytes") is not None:
        return True
    text = msg.get("text")
    return text is not None and '"resize"' not in text


async def handle_frame(session: TerminalSession, msg: Message, *, readonly: bool) -> None:
    """One frame from the browser: keystrokes (binary, or text not JSON), resize or input control."""
    if readonly:
        return
    if msg.get("bytes") is not None:
        await session.write(msg["bytes"])
    elif msg.get("text") is not None:
        text = msg["text"]
        try:
            ctl = json.loads(text)
        except ValueError:
            ctl = None
        if isinstance(ctl, dict) and "resize" in ctl:
            cols, rows = ctl["resize"]
            await session.resize(int(cols), int(rows))
        elif isinstance(ctl, dict) and "input" in ctl:
            await session.write(str(ctl["input"]).encode())
        else:
            await session.write(text.encode())


async def open_session(
    ctx: AppContext,
    ref: EnvRef,
    lab_id: str,
    cols: int,
    rows: int,
    *,
    create: bool = True,
    title: str = "",
    record_input: bool = False,
) -> TerminalSession | None:
    """The shell of ``ref`` in ``lab_id`` (opened when ``create``; recorded as the hub records:
    ``title`` and ``record_input`` go to a new recording)."""

    async def opener():  # type: ignore[no-untyped-def]
        return await ctx.backend.terminal(ref, cols, rows, cwd=lab_id)

    return await ctx.terminals.get(
        (ref.env_id, lab_id),
        opener if create else None,
        size=(cols, rows),
        title=title,
        record_input=record_input,
    )


@router.websocket("/labs/{lab_id}/terminal")
async def attendee_terminal(ws: WebSocket, lab_id: str) -> None:
    """My terminal in a lab folder: a shell that survives reconnects (frames: see the module). While
    the environment waits its turn or starts, a status line says so; nothing times out meanwhile."""
    ctx: AppContext = ws.app.state.ctx
    token = ws.query_params.get("token") or token_from(ws.headers, ws.cookies)
    me = await run_in_threadpool(resolve_in_own_session, ctx, token)  # never waits for the pool in the loop
    if me is None:
        await ws.close(code=4401, reason="join an event first")
        return
    if lab_id not in environments.event_labs(ctx, me.event):
        await ws.close(code=4404, reason="no such lab")
        return
    await ws.accept()
    early: list[Message] = []  # frames typed while the environment starts, kept for the shell
    reading: list[asyncio.Future[Message]] = []  # a read under way when it became ready
    try:
        ref = await _environment_telling(ctx, ws, me, early, reading)
        cols = int(ws.query_params.get("cols", 100))
        rows = int(ws.query_params.get("rows", 30))
        session = await open_session(
            ctx,
            ref,
            lab_id,
            cols,
            rows,
            title=f"{me.attendee.name}: {lab_id}",
            record_input=me.event.record_input,
        )
    except BackendError as exc:
        for pending in reading:
            pending.cancel()
        await ws.send_bytes(f"\r\n\x1b[31m{exc.message}\x1b[0m\r\n".encode())
        await ws.close(code=1011, reason=exc.reason)
        return
    except WebSocketDisconnect:
        for pending in reading:
            pending.cancel()
        return
    assert session is not None
    await bridge(ws, session, readonly=False, early=early, reading=reading[0] if reading else None)


async def _environment_telling(
    ctx: AppContext, ws: WebSocket, me: Me, early: list[Message], handover: list[asyncio.Future[Message]]
) -> EnvRef:
    """The attendee's environment (started, or joined while it starts); each queue place and
    progress message meanwhile goes to the terminal as one status line, cleared once ready. The
    socket is read all along (its frames kept in ``early``), so a long wait never looks dead; a
    read still under way at the end is handed over in ``handover``, never cancelled (a frame that
    arrives as it is cancelled would be lost: keystrokes typed the moment the terminal opens)."""
    sub = ctx.live.subscribe(me.event.id or 0, me.id)

    async def ensure() -> EnvRef:
        with Session(ctx.engine, expire_on_commit=False) as db:
            return await environments.ensure_environment(ctx, db, event=me.event, attendee=me.attendee)

    task = asyncio.ensure_future(ensure())
    told = False
    reading: asyncio.Future[Message] | None = None
    try:
        while not task.done():
            news = asyncio.ensure_future(sub.get())
            if reading is None and not (early and early[-1]["type"] == "websocket.disconnect"):
                reading = asyncio.ensure_future(ws.receive())
            waits: set[asyncio.Future[Any]] = {task, news} | ({reading} if reading else set())
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if reading is not None and reading.done():
                early.append(reading.result())
                reading = None
            if not news.done():
                news.cancel()
                continue
            line = status_line(me.attendee.lang, news.result())
            if line:
                await ws.send_bytes(f"\r\x1b[2K\x1b[90m{line}\x1b[0m".encode())
                told = True
        if told:
            await ws.send_bytes(b"\r\x1b[2K")
        return task.result()
    finally:
        sub.close()
        if reading is not None:
            handover.append(reading)
        if not task.done():  # the socket went away: the start goes on (its state is stored)
            task.add_done_callback(lambda done: done.cancelled() or done.exception())


def status_line(lang: str, ev: LiveEvent) -> str:
    """What the terminal shows for a live event while the environment starts ("" for none)."""
    if ev.kind == Kind.env_queue:
        ahead = int(ev.data.get("ahead", 0))
        if ahead <= 0:
            return gettext(lang, "Starting your environment: you are next")
        return gettext(lang, "Starting your environment: %(ahead)s ahead of you") % {"ahead": ahead}
    if ev.kind == Kind.env_progress:
        return str(ev.data.get("message", ""))
    return ""


@router.websocket("/environments/{env_id}/terminal")
async def instructor_terminal(ws: WebSocket, env_id: str) -> None:
    """A staff member's view of an attendee's terminal (``routes/deps.authorize_ws``: the role's
    ``terminal.view`` on the environment's event, else close 4403). ``readonly=1`` (the default)
    never forwards keystrokes. ``lab`` picks which lab's shell (default: the most recently opened).
    ``readonly=0`` (typing) needs the role's ``share``, ``lab`` and the attendee's consent: an
    active share of that environment and lab (labserver/terminals/sharing.py), else the socket is
    closed with 4403; it is closed with 4403 too the moment the share ends, and when the person's
    right to the event goes (signed out, removed: services/staff/watch.py). Opening a typing view
    writes an audit line."""
    ctx: AppContext = ws.app.state.ctx
    readonly = ws.query_params.get("readonly", "1") != "0"
    lab_id = ws.query_params.get("lab", "")
    action = Action.terminal_view if readonly else Action.share
    me, refused = await run_in_threadpool(authorize_ws, ctx, ws, action, env_id)
    if me is None:
        await ws.close(code=refused, reason="no such environment" if refused == 4404 else "staff only")
        return
    grant = None
    if not readonly:
        grant = ctx.shares.grant(env_id, lab_id)
        if grant is None:
            await ws.close(code=4403, reason="the attendee has not accepted sharing this terminal")
            return
    row = await run_in_threadpool(_environment_row, ctx, env_id)
    if row is None or not row.ref:
        await ws.close(code=4404, reason="no such environment")
        return
    await ws.accept()
    ref = EnvRef.from_json(row.ref)
    session = None
    if lab_id:
        session = await open_session(ctx, ref, lab_id, 100, 30, create=not readonly)
    else:
        live = [s for k, s in ctx.terminals.sessions.items() if k[0] == env_id and not s.closed]
        session = live[-1] if live else None
    if session is None:
        await ws.send_bytes(
            b"\r\n[no open terminal for this attendee yet: it appears when they open one]\r\n"
        )
        await ws.close(code=1000)
        return
    held = ctx.staff_watch.hold(me.principal, row.event_id)
    try:
        if grant is None:
            await _until_signed_out(ws, held, bridge(ws, session, readonly=readonly))
            return
        share = grant
        me.note(terminal="typing", lab=lab_id)
        await run_in_threadpool(audit.record, ctx.engine, me)

        def typed() -> None:
            help_share.typed(ctx, share, who=me.name)

        await _until_signed_out(ws, held, bridge(ws, session, readonly=False, share=share, on_typed=typed))
    finally:
        ctx.staff_watch.release(held)


async def _until_signed_out(ws: WebSocket, held: Held, bridged: Coroutine[Any, Any, None]) -> None:
    """Run ``bridged`` until it ends or the person's right to the event goes (then 4403)."""
    task = asyncio.ensure_future(bridged)
    ended = asyncio.ensure_future(held.ended.wait())
    try:
        done, _ = await asyncio.wait({task, ended}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done:
            with contextlib.suppress(Exception):  # first, so the bridge's own close does not say 1000
                await ws.close(code=4403, reason="signed out")
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    finally:
        ended.cancel()


def _environment_row(ctx: AppContext, env_id: str) -> Environment | None:
    with Session(ctx.engine, expire_on_commit=False) as db:
        return db.get(Environment, env_id)
