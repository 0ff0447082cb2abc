"""What ``/metrics`` reads at each scrape (``labserver.observability.metrics.Snapshot``): environments counted per
(state, reason) in the database, terminal shells and SSE streams held by this process, checks
waiting for a slot. One short query; the session is released before the answer is rendered."""

from __future__ import annotations

from sqlalchemy import func
from sqlmodel import Session, select

from labserver.db import in_thread, release
from labserver.models import Environment
from labserver.observability import metrics
from labserver.services.context import AppContext


def _environment_counts(session: Session) -> dict[tuple[str, str], int]:
    rows = session.exec(
        select(Environment.state, Environment.reason, func.count()).group_by(
            Environment.state, Environment.reason
        )
    ).all()
    release(session)
    return {(state, reason or ""): int(count) for state, reason, count in rows}


async def snapshot(ctx: AppContext, session: Session) -> metrics.Snapshot:
    """Call on the server's loop (terminals and streams are the loop's); the query runs in a thread."""
    environments = await in_thread(_environment_counts, session)
    sessions = list(ctx.terminals.sessions.values())
    return metrics.Snapshot(
        environments=environments,
        terminals_open=sum(not s.closed for s in sessions),
        terminals_attached=sum(bool(s.viewers) and not s.closed for s in sessions),
        sse_clients=ctx.live.subscribers,
        checks_waiting=ctx.check_queue.waiting_count() if ctx.check_queue is not None else 0,
        live_published=dict(ctx.live.published),
        live_delivered=ctx.live.delivered,
        live_encoded=ctx.live.encoded,
    )
