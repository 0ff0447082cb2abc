"""The instructor grid's delta for one live event: the cell it changed, read from the database.

A ``check.finished`` or ``step.opened`` event changes one cell of the grid; the cell (status,
attempts, times) is read from the database. Each instructor stream used to read it itself, in its
render callback, on the event loop: with 5 dashboards that is 5 blocking queries per check while
every SSE stream of the room (300 attendee pages) waits for the loop, which the load rehearsal
(``bench/rehearsal.py``) showed as the delivery tail of issue 22.

Now the instructor stream asks :meth:`labserver.live.LiveHub.once` for it: one read per live event
however many dashboards stream it, in a worker thread with a session of its own (opened and closed
there, so the loop never waits for the database and no connection outlives the read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from labserver.live import Kind, LiveEvent
from labserver.models import CheckRun, Event
from labserver.services import room

if TYPE_CHECKING:
    from labserver.services.context import AppContext

CELL_KINDS = (Kind.check_finished, Kind.step_opened)


def read_cell(ctx: AppContext, event: Event, ev: LiveEvent) -> dict[str, Any] | None:
    """The ``cell`` payload for ``ev`` (a cell kind with an attendee), or None when the cell is not
    on the grid. Opens and closes its own session (call it from a worker thread)."""
    assert ev.attendee_id is not None
    data = ev.data
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
    return {"cell": cells[0], "run": data.get("run_id"), "at": at, "status": data.get("status")}
