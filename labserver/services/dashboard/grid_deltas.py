"""The instructor grid's delta for one live event: the cell it changed, read from the database.

A ``check.finished`` or ``step.opened`` event changes one cell of the grid (status, attempts,
times), read from the database. Where the change is committed (:func:`labserver.services.grading.checking`
storing a run's verdict, :func:`labserver.services.reporting.progress.open_step`), the same worker thread and
session read the cell right after the commit (:func:`cell_after_commit`) and the event carries it
(``grid``), when a dashboard of the event is open: the instructor streams then only encode it,
once for all of them (``LiveHub.memo``), with no read and no trip through the worker threads of
their own. Before, each cell was read in a worker thread of its own when the instructor stream got
to the event, in order: under a room's load (the load rehearsal with a check queue, issue 30) those
reads waited behind the room's other threads and each other, and the grid fell tens of seconds
behind while the attendee pages got the same events at once.

An event without ``grid`` (published before a dashboard opened) is read by :func:`read_cell`, once
per live event however many dashboards stream it (:meth:`labserver.live.LiveHub.once`), in a worker
thread with a session of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from labserver.live import Kind, LiveEvent
from labserver.models import CheckRun, Event
from labserver.services.dashboard import room

if TYPE_CHECKING:
    from labserver.services.context import AppContext

CELL_KINDS = (Kind.check_finished, Kind.step_opened)


def cell_payload(
    ctx: AppContext,
    session: Session,
    event: Event,
    *,
    attendee_id: int,
    lab: str,
    step: str,
    run: CheckRun | None = None,
) -> dict[str, Any] | None:
    """The grid's ``cell`` payload for one attendee's step as committed in ``session`` (``run``: the
    check that just finished, for its id, status and finish time), or None when the step is not on
    the event's grid. Blocking: call it in a worker thread."""
    facts = room.load_facts(ctx, session, event, attendee_id=attendee_id)
    cells = room.attendee_cells(facts, attendee_id, [(lab, step)])
    if not cells:
        return None
    at = None
    if run is not None and run.finished_at is not None:
        at = room.aware(run.finished_at).timestamp()
    return {
        "cell": cells[0],
        "run": None if run is None else run.id,
        "at": at,
        "status": None if run is None else str(run.status),
    }


def cell_after_commit(
    ctx: AppContext,
    session: Session,
    event: Event,
    *,
    attendee_id: int,
    lab: str,
    step: str,
    run: CheckRun | None = None,
) -> dict[str, Any] | None:
    """:func:`cell_payload` for the ``grid`` field of the event about to be published, when a
    dashboard of ``event`` is open (else None: nobody would read it). Call in the worker thread
    that committed the change, before publishing."""
    if event.id is None or not ctx.live.watched(event.id):
        return None
    return cell_payload(ctx, session, event, attendee_id=attendee_id, lab=lab, step=step, run=run)


def read_cell(ctx: AppContext, event: Event, ev: LiveEvent) -> dict[str, Any] | None:
    """The ``cell`` payload for ``ev`` (a cell kind with an attendee), or None when the cell is not
    on the grid. Opens and closes its own session (call it from a worker thread)."""
    assert ev.attendee_id is not None
    data = ev.data
    with Session(ctx.engine, expire_on_commit=False) as session:
        run = None
        if ev.kind == Kind.check_finished and data.get("run_id"):
            run = session.get(CheckRun, data["run_id"])
        out = cell_payload(
            ctx,
            session,
            event,
            attendee_id=ev.attendee_id,
            lab=str(data.get("lab")),
            step=str(data.get("step")),
            run=run,
        )
    if out is not None:
        out["run"], out["status"] = data.get("run_id"), data.get("status")
    return out
