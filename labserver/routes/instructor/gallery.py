"""The live gallery (instructor only): the page ``/instructor/events/{id}/gallery`` and its one
stream ``GET /api/v1/events/{id}/gallery/stream``.

The page holds one Server-Sent Events stream for every thumbnail (never one per thumbnail). SSE
events (``data`` is JSON):

- ``ready``: ``{"event_id", "interval_s", "rows", "cols"}``, the stream is live;
- ``thumbs``: ``{"t": [[attendee_id, lab, drop, keep, tail], ...], "at": epoch}`` at most once per
  tick (:data:`~labserver.services.support.gallery.INTERVAL_S`) and only when a thumbnail changed; lines
  become ``old[drop:drop + keep] + tail``; ``lab`` null: that attendee has no open terminal
  (:mod:`labserver.services.support.gallery`);
- the instructor stream's grid deltas (``cell``, ``run``, ``env``, ``help``, ``resync``, ...,
  :mod:`labserver.routes.instructor.stream`), so sorting by progress, failing and stuck follows
  the room on the same connection.

Authorization: both routes need the instructor (router dependency for the stream, a 303 to the
login page for the page); attendees get 403 / 303. The thumbnails come only from the environments
of the event in the path (``services.support.gallery.event_envs``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session
from sse_starlette.sse import EventSourceResponse

from labserver.live import Kind, LiveEvent, Subscription
from labserver.models import Event
from labserver.routes.deps import Ctx, DbId, SessionDep, require
from labserver.routes.instructor.api import get_event
from labserver.routes.instructor.pages import ViewPage, instructor_base
from labserver.routes.instructor.stream import GRID_KINDS, grid_event, prefetch
from labserver.routes.pages import render_page
from labserver.schemas import SSE, EventPublic
from labserver.services.context import AppContext
from labserver.services.joining import event_admin
from labserver.services.staff.audit import Acting
from labserver.services.staff.roles import Action
from labserver.services.support.gallery import COLS, INTERVAL_S, ROWS, GalleryFeed, event_envs

api = APIRouter(prefix="/api/v1", tags=["instructor"])
pages = APIRouter(prefix="/instructor", include_in_schema=False, tags=["instructor-pages"])


async def every(interval_s: float) -> AsyncIterator[None]:
    """A tick at once, then one every ``interval_s``."""
    while True:
        yield None
        await asyncio.sleep(interval_s)


def _sse(name: str, payload: dict[str, Any], seq: int | None = None) -> dict[str, str]:
    out = {"event": name, "data": json.dumps(payload, separators=(",", ":"), ensure_ascii=False)}
    if seq is not None:
        out["id"] = str(seq)
    return out


async def gallery_stream(
    ctx: AppContext, event: Event, sub: Subscription, feed: GalleryFeed, ticks: AsyncIterator[None]
) -> AsyncIterator[dict[str, str]]:
    """``ready``, then the hub's grid deltas as they come and ``thumbs`` on each tick of ``ticks``
    that changed a thumbnail. Unsubscribes when the client goes away."""
    tick: asyncio.Future[None] = asyncio.ensure_future(anext(ticks))
    news: asyncio.Future[LiveEvent] = asyncio.ensure_future(sub.get())
    try:
        yield _sse(
            "ready", {"event_id": event.id, "interval_s": INTERVAL_S, "rows": feed.rows, "cols": feed.cols}
        )
        while True:
            waits: set[asyncio.Future[Any]] = {tick, news}
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if news in done:
                ev = news.result()
                news = asyncio.ensure_future(sub.get())
                if ev.kind == Kind.env_state and ev.attendee_id is not None and ev.data.get("env_id"):
                    feed.envs[str(ev.data["env_id"])] = ev.attendee_id
                out = await grid_event(ctx, event, ev)
                if out is not None:
                    yield out
            if tick in done:
                tick = asyncio.ensure_future(anext(ticks))
                if feed.refresh_due():
                    feed.envs = await asyncio.to_thread(event_envs, ctx.engine, event.id or 0)
                updates = feed.poll()
                if updates:
                    yield _sse("thumbs", {"t": updates, "at": time.time()})
    finally:
        tick.cancel()
        news.cancel()
        sub.close()


@api.get("/events/{event_id}/gallery/stream", response_class=EventSourceResponse, responses=SSE)
async def stream(
    event_id: DbId, ctx: Ctx, me: Annotated[Acting, require(Action.view)]
) -> EventSourceResponse:
    """SSE for the gallery page: ``ready``, ``thumbs`` (every terminal's last lines, at most once a
    second per thumbnail, as differences) and the grid deltas of the instructor stream."""
    with Session(ctx.engine, expire_on_commit=False) as session:  # not held while streaming
        event = get_event(session, event_id)
    envs = await asyncio.to_thread(event_envs, ctx.engine, event_id)
    feed = GalleryFeed(ctx.terminals, envs, rows=ROWS, cols=COLS)
    sub = ctx.live.subscribe(event_id, kinds=GRID_KINDS, on_queued=prefetch(ctx, event))
    feed_stream = gallery_stream(ctx, event, sub, feed, every(INTERVAL_S))
    return EventSourceResponse(ctx.staff_watch.guard(me.principal, event_id, feed_stream), ping=15)


def gallery_context(
    request: Request, ctx: AppContext, session: Session, me: Acting, event_id: int
) -> dict[str, Any]:
    base = instructor_base(request, me, "instructor-gallery")
    event = get_event(session, event_id)
    return {
        **base,
        "ev": EventPublic.of(event, event_admin.attendee_count(session, event_id)).model_dump(),
        "config": {"event": event.id, "lang": base["lang"], "rows": ROWS, "cols": COLS},
    }


@pages.get("/events/{event_id}/gallery")
def gallery_page(
    event_id: DbId, request: Request, ctx: Ctx, session: SessionDep, me: ViewPage
) -> HTMLResponse:
    """Every attendee's terminal as a live thumbnail, sortable; a click opens the read-only view."""
    return render_page(ctx, "instructor_gallery.html", gallery_context(request, ctx, session, me, event_id))
