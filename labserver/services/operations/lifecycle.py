"""Background care of environments: the housekeeping loop (one clock for idle terminals, warm
pools and idle culling) and keeping warm environments ready for open events. Each act works only
on backends with the capability (:class:`~labserver.backends.base.WarmPooled`,
:class:`~labserver.backends.base.Stoppable`; Docker has both)."""

from __future__ import annotations

import asyncio
import logging

from sqlmodel import Session

from labserver.services.context import AppContext
from labserver.services.operations.recovery import sweep_orphaned_runs
from labserver.services.provisioning.culling import cull_idle
from labserver.services.provisioning.warming import warm_open_events

log = logging.getLogger(__name__)


async def housekeeping(ctx: AppContext, every_s: float = 60.0) -> None:
    """The one background loop: orphaned check runs, idle terminals, warm pools, idle environments, every ``every_s``."""
    while True:
        await asyncio.sleep(every_s)
        try:
            await sweep_orphaned_runs(ctx)  # no run stays "running" that nothing runs
            await ctx.terminals.reap_idle()
            await warm_open_events(ctx)  # its own short session, closed before the engine works
            with Session(ctx.engine, expire_on_commit=False) as session:
                await cull_idle(ctx, session)
        except Exception:  # keep the loop alive; the next round tries again
            log.exception("housekeeping failed")
