"""The instructor's live stream: the event-wide :class:`~labserver.live.LiveHub` subscription turned
into small deltas for the grid page.

SSE events (``data`` is JSON):

- ``ready``: the subscription is live;
- ``cell``: ``{"cell": [attendee_id, column, status, attempts, t0, t1], "run": id|null, "at": epoch}``
  after ``check.finished`` or ``step.opened`` (status ``n`` = not started; ``at`` = when the check
  finished, float seconds, for latency measurements);
- ``run``: ``{"a": attendee_id, "c": column}`` a check started;
- ``env``: ``{"a": attendee_id, "state": ...}``;
- ``help``: the ``help.*`` event, and ``share.asked|started|ended`` (the page reloads the small
  queue and the drill-down's shared terminal);
- ``announcement``, ``pace``, ``event.status``, ``solution.revealed``, ``lab.reset``: passed through;
- ``resync``: the stream fell behind; reload the grid.

A cell is read from the database and encoded once per live event for all the dashboards that
stream it, in a worker thread (``LiveHub.once`` + ``services/dashboard/grid_deltas.read_cell``): a render never
blocks the loop every attendee stream of the room is served from. Every other delta is built and
encoded once per event too (``LiveHub.memo``), however many dashboards stream it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from labserver.live import Kind, LiveEvent, Subscription
from labserver.models import Event
from labserver.services.context import AppContext
from labserver.services.dashboard.grid_deltas import CELL_KINDS, read_cell
from labserver.services.provisioning.environments import event_labs

PASS_THROUGH = {
    Kind.announcement,
    Kind.pace,
    Kind.event_status,
    Kind.solution_revealed,
    Kind.lab_reset,
    Kind.resync,
}
SHARE_KINDS = {Kind.share_asked, Kind.share_started, Kind.share_ended}  # sent as ``help``
#: the names of this stream's own SSE events (besides ``ready`` and the pass-through kinds)
GRID_EVENTS = ("cell", "run", "env", "help")
#: the live kinds this stream shows: its subscription takes only these (a room's ``check.queued``
#: and ``env.queue`` positions, hundreds a second, would otherwise fill its queue into a resync)
GRID_KINDS = frozenset(
    {
        *CELL_KINDS,
        Kind.check_started,
        Kind.env_state,
        *(k for k in Kind if k.startswith("help.")),
        *SHARE_KINDS,
        *PASS_THROUGH,
    }
)


def _columns(ctx: AppContext, event: Event) -> dict[tuple[str, str], int]:
    keys = [(lab_id, s.id) for lab_id in event_labs(ctx, event) for s in ctx.catalog.labs[lab_id].steps]
    return {k: i for i, k in enumerate(keys)}


def prefetch(ctx: AppContext, event: Event) -> Callable[[LiveEvent], None]:
    """The ``on_queued`` of an instructor subscription: a cell event's read starts the moment it is
    queued (once for all dashboards), not when the stream gets to it behind the events before."""

    def start(ev: LiveEvent) -> None:
        if ev.kind in CELL_KINDS and ev.attendee_id is not None and "grid" not in ev.data:
            ctx.live.start_once(ev, functools.partial(cell_sse, ctx, event, ev))

    return start


def grid_sse(name: str, payload: dict[str, Any], ev: LiveEvent) -> dict[str, str]:
    return {"event": name, "id": str(ev.seq), "data": json.dumps(payload, separators=(",", ":"))}


def cell_sse(ctx: AppContext, event: Event, ev: LiveEvent) -> dict[str, str] | None:
    """The ``cell`` SSE event for a cell kind, read and encoded in a worker thread (``LiveHub.once``)."""
    cell = read_cell(ctx, event, ev)
    return None if cell is None else grid_sse("cell", cell, ev)


def translate(ctx: AppContext, event: Event, ev: LiveEvent) -> tuple[str, dict[str, Any]] | None:
    """(sse event name, payload) for a live event that is not a cell kind (nothing to read), or None
    when the grid page does not care."""
    data = ev.data
    if ev.kind == Kind.check_started and ev.attendee_id is not None:
        column = _columns(ctx, event).get((str(data.get("lab")), str(data.get("step"))))
        return None if column is None else ("run", {"a": ev.attendee_id, "c": column})
    if ev.kind == Kind.env_state:
        return "env", {"a": ev.attendee_id, "state": data.get("state"), "env_id": data.get("env_id")}
    if ev.kind.startswith("help.") or ev.kind in SHARE_KINDS:
        return "help", {"kind": ev.kind, "a": ev.attendee_id, **data}
    if ev.kind in PASS_THROUGH:
        return str(ev.kind), {"a": ev.attendee_id, **data}
    return None


async def grid_event(ctx: AppContext, event: Event, ev: LiveEvent) -> dict[str, str] | None:
    """The grid's SSE dict for ``ev`` (None: the grid does not show it), built and encoded once per
    live event for every dashboard of ``event`` (the dict is shared: never change it)."""
    if ev.kind in CELL_KINDS and ev.attendee_id is not None:
        if "grid" in ev.data:  # read where it was committed (services/dashboard/grid_deltas.py): encode only
            return ctx.live.memo(ev, "grid", lambda: grid_sse("cell", ev.data["grid"], ev))
        out: dict[str, str] | None = await ctx.live.once(ev, functools.partial(cell_sse, ctx, event, ev))
        return out

    def build() -> dict[str, str] | None:
        delta = translate(ctx, event, ev)
        return None if delta is None else grid_sse(delta[0], delta[1], ev)

    return ctx.live.memo(ev, "grid", build)


def instructor_stream(
    ctx: AppContext, event: Event, sub: Subscription, *, keepalive_s: float = 15.0
) -> AsyncIterator[dict[str, str]]:
    """The hub's stream with events translated to compact grid deltas."""
    return ctx.live.stream(
        sub,
        keepalive_s=keepalive_s,
        ready={"event_id": event.id},
        render=functools.partial(grid_event, ctx, event),
    )
