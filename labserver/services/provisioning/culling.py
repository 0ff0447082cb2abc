"""Idle culling: stop environments nobody has used for a while, on any :class:`Stoppable` backend.
Their workspace stays; the next visit (``create``) starts them again.

One policy, one act, one round:

- :func:`select_idle` is the policy: pure, its inputs are timestamps and the time comes from the
  one clock (``labserver.clock``), so it is tested by moving a :class:`~labserver.clock.TestClock`;
- :func:`cull` applies it to a set of environments of a backend and stops what it selects;
- :func:`cull_idle` is one round of the housekeeping loop (:func:`labserver.services.operations.lifecycle.housekeeping`):
  activity from the database (the attendee's last request or check), environments an instructor or
  the attendee is watching in a terminal kept, each stopped environment stored ``stopped``
  (reason ``idle``) and published.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from sqlmodel import Session, col, func, select

from labserver import clock
from labserver.backends.base import EnvRef, EnvState, Stoppable
from labserver.db import release
from labserver.models import Attendee, CheckRun, Environment
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import set_state

log = logging.getLogger(__name__)

IDLE_MESSAGE = "Stopped after a long idle time: it starts again when you come back."


@dataclass(frozen=True)
class IdlePolicy:
    idle_minutes: float  # 0 = never cull
    grace_minutes: float = 5.0  # never cull an environment younger than this


def select_idle(
    last_activity: Mapping[str, dt.datetime],
    now: dt.datetime,
    policy: IdlePolicy,
    created: Mapping[str, dt.datetime] | None = None,
    keep: Iterable[str] = (),
) -> list[str]:
    """Environment ids to stop: no activity for ``idle_minutes`` (and older than the grace period).
    ``keep`` (e.g. environments an instructor is watching) is never selected."""
    if policy.idle_minutes <= 0:
        return []
    keep_set = set(keep)
    idle_for = dt.timedelta(minutes=policy.idle_minutes)
    grace = dt.timedelta(minutes=policy.grace_minutes)
    chosen = []
    for env_id, last in sorted(last_activity.items()):
        if env_id in keep_set:
            continue
        born = (created or {}).get(env_id)
        if born is not None and now - born < grace:
            continue
        if now - last >= idle_for:
            chosen.append(env_id)
    return chosen


async def cull(
    backend: Stoppable,
    refs: Iterable[EnvRef],
    last_activity: Mapping[str, dt.datetime],
    policy: IdlePolicy,
    keep: Iterable[str] = (),
    *,
    created: Mapping[str, dt.datetime] | None = None,
    before_stop: Callable[[EnvRef], Awaitable[None]] | None = None,
    after_stop: Callable[[EnvRef], Awaitable[None]] | None = None,
) -> list[str]:
    """Stop the idle environments among ``refs``; returns their ids. Time comes from ``clock.now()``.
    ``before_stop`` / ``after_stop`` run around each ``backend.stop`` (close shells, store state)."""
    by_id = {r.env_id: r for r in refs}
    activity = {k: v for k, v in last_activity.items() if k in by_id}
    chosen = select_idle(activity, clock.now(), policy, created=created, keep=keep)
    for env_id in chosen:
        ref = by_id[env_id]
        if before_stop is not None:
            await before_stop(ref)
        await backend.stop(ref)
        if after_stop is not None:
            await after_stop(ref)
    return chosen


async def cull_idle(ctx: AppContext, session: Session) -> list[str]:
    """One round: stop ready environments idle for ``DOCKER__IDLE_CULL_MINUTES``; never one with an
    open terminal. Activity = the attendee's last request or check, whichever is later. Acts only
    on a :class:`Stoppable` backend."""
    backend = ctx.backend
    minutes = ctx.settings.docker.idle_cull_minutes
    if not isinstance(backend, Stoppable) or minutes <= 0:
        return []
    rows = session.exec(
        select(Environment).where(Environment.state == EnvState.ready, Environment.backend == backend.name)
    ).all()
    last_check = dict(
        session.exec(
            select(CheckRun.attendee_id, func.max(CheckRun.created_at)).group_by(col(CheckRun.attendee_id))
        ).all()
    )
    refs: list[EnvRef] = []
    activity: dict[str, dt.datetime] = {}
    created: dict[str, dt.datetime] = {}
    for row in rows:
        if not row.ref:
            continue
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
        refs.append(EnvRef.from_json(row.ref))
        activity[row.id] = max(seen)
        created[row.id] = row.created_at
    watched = {env_id for (env_id, _lab), s in ctx.terminals.sessions.items() if s.viewers}
    release(session)  # no connection held while the engine stops containers

    async def close_shells(ref: EnvRef) -> None:
        await ctx.terminals.close_env(ref.env_id)

    async def store_stopped(ref: EnvRef) -> None:
        row = session.get(Environment, ref.env_id)
        if row is not None:
            set_state(ctx, session, row, EnvState.stopped, message=IDLE_MESSAGE, reason="idle")
        ctx.admission.room_freed()
        log.info("stopped idle environment %s", ref.env_id)

    return await cull(
        backend,
        refs,
        activity,
        IdlePolicy(minutes),
        keep=watched,
        created=created,
        before_stop=close_shells,
        after_stop=store_stopped,
    )
