"""Warm pools follow the events: an event's pool starts filling the moment it opens (and when the
server starts with open events), not at the next housekeeping tick; it is emptied when the event
closes. The size is the event's ``warm_pool`` (set it to the expected head count) or, when unset,
``LABSERVER_DOCKER__WARM_POOL``. Acts only on a :class:`~labserver.backends.base.WarmPooled`
backend (Docker).

No database connection is held while the backend works: the event and the template spec are read
in a short session, closed before :meth:`WarmPooled.prepare_event` runs.

:func:`warm_soon` may be called from any thread (sync routes run in a thread pool): it hands the
work to the server's event loop and returns at once; the pool fills in the background.
"""

from __future__ import annotations

import asyncio
import logging

from sqlmodel import Session, select

from labserver.backends.base import EnvSpec, WarmPooled
from labserver.models import Attendee, Event, EventStatus
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import spec_for

log = logging.getLogger(__name__)


def pool_size(ctx: AppContext, event: Event) -> int:
    """How many ready environments ``event`` should have now (0 unless it is open)."""
    if event.status != EventStatus.open or event.selfpaced:
        return 0
    return event.warm_pool if event.warm_pool is not None else ctx.settings.docker.warm_pool


def _template(ctx: AppContext, event: Event) -> EnvSpec:
    assert event.id is not None
    return spec_for(ctx, event, Attendee(id=0, event_id=event.id, name="warm", token_hash=""))


async def warm_event(ctx: AppContext, event_id: int) -> int:
    """Bring the event's pool to its size now (0 drains it); returns how many were made."""
    backend = ctx.backend
    if not isinstance(backend, WarmPooled):
        return 0
    with Session(ctx.engine, expire_on_commit=False) as session:
        event = session.get(Event, event_id)
        if event is None:
            return 0
        size, template = pool_size(ctx, event), _template(ctx, event)
    return int(await backend.prepare_event(event_id, template, size))


async def warm_open_events(ctx: AppContext) -> int:
    """Keep every open event's pool at its size (the housekeeping loop and server start)."""
    backend = ctx.backend
    if not isinstance(backend, WarmPooled):
        return 0
    with Session(ctx.engine, expire_on_commit=False) as session:
        events = session.exec(select(Event).where(Event.status == EventStatus.open)).all()
        wanted = [(e.id, pool_size(ctx, e), _template(ctx, e)) for e in events if pool_size(ctx, e) > 0]
    made = 0
    for event_id, size, template in wanted:
        assert event_id is not None
        made += int(await backend.prepare_event(event_id, template, size))
    return made


def warm_soon(ctx: AppContext, event_id: int | None) -> None:
    """Start :func:`warm_event` in the background on the server's loop (no-op before the server
    has started, e.g. in a script)."""
    loop = ctx.loop
    if event_id is None or loop is None or loop.is_closed() or not isinstance(ctx.backend, WarmPooled):
        return

    def spawn() -> None:
        task = loop.create_task(warm_event(ctx, event_id))
        ctx.background.add(task)
        task.add_done_callback(_done(ctx))

    loop.call_soon_threadsafe(spawn)


def start_warming(ctx: AppContext) -> None:
    """At server start (on the loop): fill the pools of the events that are already open."""
    ctx.loop = asyncio.get_running_loop()
    if not isinstance(ctx.backend, WarmPooled):
        return
    task = ctx.loop.create_task(warm_open_events(ctx))
    ctx.background.add(task)
    task.add_done_callback(_done(ctx))


def _done(ctx: AppContext):  # type: ignore[no-untyped-def]
    def done(task: asyncio.Task[int]) -> None:
        ctx.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("warm pool: %s", task.exception())

    return done
