"""Background care of environments, driven by the housekeeping loop: keep warm containers ready
for open events, and stop environments nobody has used for a while (their workspace stays; the
next visit starts them again). Both only act on backends that support them (Docker)."""

from __future__ import annotations

import logging

from sqlmodel import Session, col, func, select

from labserver.backends.base import EnvRef, EnvState
from labserver.models import Attendee, CheckRun, Environment, Event, EventStatus
from labserver.services.context import AppContext
from labserver.services.environments import set_state, spec_for

log = logging.getLogger(__name__)


async def warm_open_events(ctx: AppContext, session: Session) -> int:
    """Ask the backend to keep ``DOCKER__WARM_POOL`` ready environments per open event."""
    prepare = getattr(ctx.backend, "prepare_event", None)
    if prepare is None or ctx.settings.docker.warm_pool <= 0:
        return 0
    made = 0
    for event in session.exec(select(Event).where(Event.status == EventStatus.open)).all():
        assert event.id is not None
        template = spec_for(ctx, event, Attendee(id=0, event_id=event.id, name="warm", token_hash=""))
        made += int(await prepare(event.id, template))
    return made


async def cull_idle(ctx: AppContext, session: Session) -> list[str]:
    """Stop ready environments idle for ``DOCKER__IDLE_CULL_MINUTES``; never one with an open
    terminal. Activity = the attendee's last request or check, whichever is later."""
    stop = getattr(ctx.backend, "stop", None)
    minutes = ctx.settings.docker.idle_cull_minutes
    if stop is None or minutes <= 0:
        return []
    from labserver import clock
    from labserver.backends.docker.warmpool import IdlePolicy, select_idle

    rows = session.exec(
        select(Environment).where(
            Environment.state == EnvState.ready, Environment.backend == ctx.backend.name
        )
    ).all()
    last_check = dict(
        session.exec(
            select(CheckRun.attendee_id, func.max(CheckRun.created_at)).group_by(col(CheckRun.attendee_id))
        ).all()
    )
    activity = {}
    created = {}
    for row in rows:
        attendee = session.get(Attendee, row.attendee_id)
        seen = [
            t
            for t in (
                attendee.last_seen_at if attendee else None,
                last_check.get(row.attendee_id),
                row.updated_at,
            )
            if t is not None
        ]
        activity[row.id] = max(seen)
        created[row.id] = row.created_at
    watched = {env_id for (env_id, _lab), s in ctx.terminals.sessions.items() if s.viewers}
    chosen = select_idle(activity, clock.now(), IdlePolicy(minutes), created=created, keep=watched)
    for env_id in chosen:
        env_row = session.get(Environment, env_id)
        if env_row is None or not env_row.ref:
            continue
        await ctx.terminals.close_env(env_id)
        await stop(EnvRef.from_json(env_row.ref))
        set_state(
            ctx,
            session,
            env_row,
            EnvState.stopped,
            message="Stopped after a long idle time: it starts again when you come back.",
            reason="idle",
        )
        log.info("stopped idle environment %s", env_id)
    return chosen
