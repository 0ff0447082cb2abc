"""Background care of environments: the housekeeping loop (one clock for idle terminals, warm
pools and idle culling) and keeping warm environments ready for open events. Each act works only
on backends with the capability (:class:`~labserver.backends.base.WarmPooled`,
:class:`~labserver.backends.base.Stoppable`; Docker has both)."""

from __future__ import annotations

import asyncio
import logging

from sqlmodel import Session, select

from labserver.backends.base import WarmPooled
from labserver.db import release
from labserver.models import Attendee, Event, EventStatus
from labserver.services.context import AppContext
from labserver.services.culling import cull_idle
from labserver.services.environments import spec_for

log = logging.getLogger(__name__)


async def warm_open_events(ctx: AppContext, session: Session) -> int:
    """Ask the backend to keep ``DOCKER__WARM_POOL`` ready environments per open event."""
    backend = ctx.backend
    if not isinstance(backend, WarmPooled) or ctx.settings.docker.warm_pool <= 0:
        return 0
    made = 0
    events = session.exec(select(Event).where(Event.status == EventStatus.open)).all()
    release(session)  # no connection held while the engine makes containers
    for event in events:
        assert event.id is not None
        template = spec_for(ctx, event, Attendee(id=0, event_id=event.id, name="warm", token_hash=""))
        made += int(await backend.prepare_event(event.id, template))
    return made


async def housekeeping(ctx: AppContext, every_s: float = 60.0) -> None:
    """The one background loop: idle terminals, warm pools, idle environments, every ``every_s``."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await ctx.terminals.reap_idle()
            with Session(ctx.engine, expire_on_commit=False) as session:
                await warm_open_events(ctx, session)
                await cull_idle(ctx, session)
        except Exception:  # keep the loop alive; the next round tries again
            log.exception("housekeeping failed")
