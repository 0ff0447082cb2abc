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
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sqlmodel import Session

from labserver.live import Kind, LiveEvent, Subscription
from labserver.models import CheckRun, Event
from labserver.services import room
from labserver.services.context import AppContext
from labserver.services.environments import event_labs

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


def _columns(ctx: AppContext, event: Event) -> dict[tuple[str, str], int]:
    keys = [(lab_id, s.id) for lab_id in event_labs(ctx, event) for s in ctx.catalog.labs[lab_id].steps]
    return {k: i for i, k in enumerate(keys)}


def translate(ctx: AppContext, event: Event, ev: LiveEvent) -> tuple[str, dict[str, Any]] | None:
    """(sse event name, payload) for one live event, or None when the grid page does not care."""
    data = ev.data
    if ev.kind in (Kind.check_finished, Kind.step_opened) and ev.attendee_id is not None:
        key = (str(data.get("lab")), str(data.get("step")))
        with Session(ctx.engine, expire_on_commit=False) as session:
            facts = room.load_facts(ctx, session, event, attendee_id=ev.attendee_id)
            cells = room.attendee_cells(facts, ev.attendee_id, [key])
            at = None
            if ev.kind == Kind.check_finished and data.get("run_id"):
                run = session.get(CheckRun, data["run_id"])
                if run is not None and run.finished_at is not None:
                    at = room.aware(run.finished_at).timestamp()
        if not cells:
            return None
        return "cell", {"cell": cells[0], "run": data.get("run_id"), "at": at, "status": data.get("status")}
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


def instructor_stream(
    ctx: AppContext, event: Event, sub: Subscription, *, keepalive_s: float = 15.0
) -> AsyncIterator[dict[str, str]]:
    """The hub's stream with events translated to compact grid deltas."""

    def render(ev: LiveEvent) -> dict[str, str] | None:
        out = translate(ctx, event, ev)
        if out is None:
            return None
        name, payload = out
        return {"event": name, "id": str(ev.seq), "data": json.dumps(payload, separators=(",", ":"))}

    return ctx.live.stream(sub, keepalive_s=keepalive_s, ready={"event_id": event.id}, render=render)
