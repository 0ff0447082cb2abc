"""Issue 30, a room whose checks outrun the machine: with 300 checks waiting for a slot, what one
admission and one result cost the room's streams, counted on the real app and SQLite (live events
published, handed to streams, encoded as JSON, database queries); nothing is timed.

Before: each admission told every waiting check its new place (300 events, 300 SSE writes, 300
encodes), and each dashboard encoded every grid delta itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import event as sa_event
from sqlmodel import Session

from labserver import clock
from labserver.live import Kind, Subscription
from labserver.models import Attendee, CheckRun, CheckStatus, Event
from labserver.routes.instructor.stream import GRID_KINDS, grid_event, prefetch
from labserver.services.dashboard import grid_deltas
from labserver.services.grading import checking
from labserver.services.joining.events import join
from labserver.services.queue_places import bands_up_to
from tests.conftest import EVENT_CODE

LAB, STEP = "getting-started", "write-file"
WAITING = 300
DASHBOARDS = 5


@pytest.fixture
def room(app: FastAPI, event: Event) -> list[Attendee]:
    """The event's attendees (rows only: no environment is started)."""
    with Session(app.state.ctx.engine, expire_on_commit=False) as session:
        return [join(session, event_code=EVENT_CODE, name=f"a{i:03d}")[0] for i in range(WAITING + 5)]


@pytest.fixture
def queries(app: FastAPI) -> Iterator[list[str]]:
    """Every SQL statement the app's engine runs while the test does."""
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(str(args[2]))

    sa_event.listen(app.state.ctx.engine, "before_cursor_execute", count)
    yield seen
    sa_event.remove(app.state.ctx.engine, "before_cursor_execute", count)


async def _render(
    app: FastAPI, event: Event, subs: list[Subscription], grids: list[Subscription]
) -> list[Any]:
    """What every stream would send for what it was handed: attendee pages encode with the hub,
    dashboards build their grid delta."""
    ctx = app.state.ctx
    out: list[Any] = []
    for sub in subs:
        while not sub.queue.empty():
            out.append(ctx.live.encode(sub.queue.get_nowait()))
    for sub in grids:
        while not sub.queue.empty():
            out.append(await grid_event(ctx, event, sub.queue.get_nowait()))
    return out


def _counts(app: FastAPI) -> tuple[int, int, int, int]:
    live = app.state.ctx.live
    return sum(live.published.values()), live.delivered, live.encoded, live.computed


async def _queue_up(
    app: FastAPI, event: Event, room: list[Attendee]
) -> tuple[list[asyncio.Task[None]], dict[int, asyncio.Event]]:
    """Every attendee of ``room`` presses Check (a check slot of the real fair queue each, held until
    its gate opens): the queue's slots fill, the rest wait."""
    ctx = app.state.ctx
    gates = {a.id or 0: asyncio.Event() for a in room}

    async def hold(a: Attendee) -> None:
        assert a.id is not None
        async with checking.check_slot(
            ctx, event_id=event.id or 0, attendee_id=a.id, run_id=a.id, lab=LAB, step=STEP
        ):
            await gates[a.id].wait()

    tasks = [asyncio.create_task(hold(a)) for a in room]
    for _ in range(5):
        await asyncio.sleep(0)
    return tasks, gates


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_one_admission_with_300_waiting_tells_a_band_edge_each_not_the_room(
    app: FastAPI, event: Event, room: list[Attendee], queries: list[str]
) -> None:
    ctx = app.state.ctx
    slots = ctx.check_queue.slots

    async def scenario() -> tuple[tuple[int, ...], tuple[int, ...]]:
        subs = [ctx.live.subscribe(event.id or 0, a.id) for a in room]
        grids = [
            ctx.live.subscribe(event.id or 0, kinds=GRID_KINDS, on_queued=prefetch(ctx, event))
            for _ in range(DASHBOARDS)
        ]
        tasks, gates = await _queue_up(app, event, room)
        assert ctx.check_queue.waiting_count() == len(room) - slots >= WAITING
        await _render(app, event, subs, grids)
        queued, queries_before = _counts(app), len(queries)
        gates[room[0].id or 0].set()  # one check ends: the first waiting one starts, the rest move up
        await _settle()
        sent = await _render(app, event, subs, grids)
        admitted = tuple(b - a for a, b in zip(queued, _counts(app), strict=True))
        assert len(queries) == queries_before  # telling places reads nothing
        assert all(isinstance(s, dict) for s in sent)
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        for sub in [*subs, *grids]:
            sub.close()
        return queued, admitted

    queued, (published, delivered, encoded, computed) = asyncio.run(scenario())
    # as the room queued: each waiting check was told its place once
    assert queued[0] == len(room) - slots
    # one admission: at most one waiting check per band is told (was: every one of the 300)
    assert published == delivered == encoded <= bands_up_to(WAITING) == 23
    assert computed == 0  # dashboards take no queue places: nothing read, nothing sent to them


def test_a_result_with_300_waiting_is_read_once_where_committed_and_encoded_once_for_every_dashboard(
    app: FastAPI, event: Event, room: list[Attendee], queries: list[str]
) -> None:
    ctx = app.state.ctx
    ada = room[-1]
    with Session(ctx.engine, expire_on_commit=False) as session:
        run = CheckRun(
            event_id=event.id,
            attendee_id=ada.id,
            lab_id=LAB,
            step_id=STEP,
            status=CheckStatus.passed,
            finished_at=clock.now(),
        )
        session.add(run)
        session.commit()
        session.refresh(run)

    async def result(dashboards: int, *, carried: bool) -> tuple[tuple[int, ...], int, int, list[Any]]:
        subs = [ctx.live.subscribe(event.id or 0, a.id) for a in room]
        grids = [
            ctx.live.subscribe(event.id or 0, kinds=GRID_KINDS, on_queued=prefetch(ctx, event))
            for _ in range(dashboards)
        ]
        tasks, gates = await _queue_up(app, event, room[:-1])  # everyone else waits for a slot
        await _render(app, event, subs, grids)
        before, queries_before = _counts(app), len(queries)
        grid = None
        if carried:  # as services/grading/checking stores a verdict: the cell read after the commit
            with Session(ctx.engine, expire_on_commit=False) as session:
                grid = grid_deltas.cell_after_commit(
                    ctx, session, event, attendee_id=ada.id or 0, lab=LAB, step=STEP, run=run
                )
            assert grid is not None and grid["run"] == run.id and grid["cell"][2] == "p"
        committed_queries = len(queries) - queries_before
        checking.publish_finished(ctx, run, ada, **({"grid": grid} if grid else {}))
        ctx.live.publish(Kind.check_started, event.id or 0, ada.id, run_id=run.id, lab=LAB, step=STEP)
        sent = await _render(app, event, subs, grids)
        cost = tuple(b - a for a, b in zip(before, _counts(app), strict=True))
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        for sub in [*subs, *grids]:
            sub.close()
        return cost, committed_queries, len(queries) - queries_before - committed_queries, sent

    one, one_read, one_streams, _ = asyncio.run(result(1, carried=True))
    five, five_read, five_streams, sent = asyncio.run(result(DASHBOARDS, carried=True))
    published, delivered, encoded, computed = five
    # two events, each to Ada's page and to every dashboard; nothing to the 300 who wait
    assert published == 2 and delivered == 2 * (1 + DASHBOARDS)
    # each event encoded once for Ada's page and once for all the dashboards; the cell was read
    # where the verdict was committed, so the dashboards read nothing
    assert encoded == 2 + 2 and computed == 0 and five_streams == one_streams == 0
    assert five_read == one_read > 0
    cells = [s for s in sent if isinstance(s, dict) and s.get("event") == "cell"]
    assert len(cells) == DASHBOARDS and all(c is cells[0] for c in cells)  # one dict, sent five times
    assert one[2:] == five[2:]  # one dashboard or five: the same encodes, the same reads
    # an event without the cell (published before a dashboard opened): one read for all dashboards
    (_, _, encoded, computed), _, streams_read, sent = asyncio.run(result(DASHBOARDS, carried=False))
    assert computed == 1 and streams_read == five_read + 1 and encoded == 2 + 1  # + the run's row
    cells = [s for s in sent if isinstance(s, dict) and s.get("event") == "cell"]
    assert len(cells) == DASHBOARDS and all(c is cells[0] for c in cells)


def test_without_a_dashboard_no_cell_is_read(
    app: FastAPI, event: Event, room: list[Attendee], queries: list[str]
) -> None:
    ctx = app.state.ctx
    ada = room[0]
    with Session(ctx.engine, expire_on_commit=False) as session:
        before = len(queries)
        assert (
            grid_deltas.cell_after_commit(ctx, session, event, attendee_id=ada.id or 0, lab=LAB, step=STEP)
            is None
        )
        assert len(queries) == before
        page = ctx.live.subscribe(event.id or 0, ada.id)  # an attendee's page is no dashboard
        assert (
            grid_deltas.cell_after_commit(ctx, session, event, attendee_id=ada.id or 0, lab=LAB, step=STEP)
            is None
        )
        dashboard = ctx.live.subscribe(event.id or 0, kinds=GRID_KINDS)
        grid = grid_deltas.cell_after_commit(ctx, session, event, attendee_id=ada.id or 0, lab=LAB, step=STEP)
        assert grid is not None and grid["cell"][2] == "n" and len(queries) > before
        page.close()
        dashboard.close()
