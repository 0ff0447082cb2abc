"""The room's grid, summaries (funnel), stuck flags, export and pacing, from database rows written with
a TestClock; the clock moves between steps instead of sleeping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from sqlmodel import Session

from labserver import clock
from labserver.clock import TestClock
from labserver.models import Attendee, CheckRun, Event, StepStart
from labserver.services.dashboard import room
from labserver.services.dashboard.pacing import is_locked
from labserver.services.reporting.completion_chart import chart_svg, series

LAB = "getting-started"


@pytest.fixture
def tc() -> Iterator[TestClock]:
    test_clock = TestClock()
    previous = clock.use(test_clock)
    yield test_clock
    clock.use(previous)


def _attendee(s: Session, event: Event, name: str) -> Attendee:
    a = Attendee(event_id=event.id or 0, name=name, token_hash=name)
    s.add(a)
    s.commit()
    s.refresh(a)
    return a


def _open(s: Session, a: Attendee, step: str) -> None:
    s.add(StepStart(attendee_id=a.id or 0, lab_id=LAB, step_id=step, started_at=clock.now()))
    s.commit()


def _check(s: Session, event: Event, a: Attendee, step: str, status: str) -> None:
    s.add(
        CheckRun(
            event_id=event.id or 0,
            attendee_id=a.id or 0,
            lab_id=LAB,
            step_id=step,
            status=status,
            created_at=clock.now(),
            finished_at=clock.now(),
        )
    )
    s.commit()


def test_grid_cells_times_and_summaries(app: FastAPI, event: Event, tc: TestClock) -> None:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        ada, bo, cy = (_attendee(s, event, n) for n in ("Ada", "Bo", "Cy"))
        _open(s, ada, "find-device")
        _open(s, bo, "find-device")
        tc.advance(120)
        _check(s, event, ada, "find-device", "failed")
        tc.advance(60)
        _check(s, event, ada, "find-device", "passed")
        _open(s, ada, "run-script")
        _check(s, event, bo, "find-device", "error")
        tc.advance(30)
        facts = room.load_facts(ctx, s, event)
        grid = room.grid(facts)
    assert grid["columns"][:2] == [[LAB, "find-device"], [LAB, "run-script"]]
    assert [a[1] for a in grid["attendees"]] == ["Ada", "Bo", "Cy"]
    cells = {(c[0], c[1]): c for c in grid["cells"]}
    start = cells[(ada.id, 0)][4]
    assert cells[(ada.id, 0)][2:] == ["p", 2, start, start + 180]
    assert cells[(ada.id, 1)][2:4] == ["w", 0]
    assert cells[(bo.id, 0)][2:4] == ["e", 1]
    assert (cy.id, 0) not in cells  # not started: absent, the payload stays small
    sums = {s["step"]: s for s in room.summaries(facts)}
    assert (
        sums["find-device"]["passed"],
        sums["find-device"]["error"],
        sums["find-device"]["not-started"],
    ) == (1, 1, 1)
    assert sums["find-device"]["reached"] == 1 and sums["run-script"]["working"] == 1
    rows = {(r["attendee"], r["step"]): r for r in room.export_rows(facts)}
    assert rows[("Ada", "find-device")]["time_spent_s"] == 180
    assert rows[("Ada", "run-script")]["time_spent_s"] == 30  # still working: up to now
    assert rows[("Cy", "find-device")]["status"] == "not-started"
    assert room.export_csv(facts).splitlines()[0] == ",".join(room.EXPORT_FIELDS)


def test_funnel_counts_an_attendee_who_passed_a_later_step(app: FastAPI, event: Event, tc: TestClock) -> None:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        ada = _attendee(s, event, "Ada")
        _check(s, event, ada, "write-file", "passed")  # skipped ahead
        facts = room.load_facts(ctx, s, event)
    sums = {x["step"]: x for x in room.summaries(facts)}
    assert sums["find-device"]["reached"] == 1 and sums["find-device"]["passed"] == 0
    assert sums["implement-rmsnorm"]["reached"] == 0


def test_stuck_flags_come_up_as_the_clock_moves(app: FastAPI, event: Event, tc: TestClock) -> None:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        fast = [_attendee(s, event, f"fast{i}") for i in range(3)]
        slow = _attendee(s, event, "slow")
        for a in [*fast, slow]:
            _open(s, a, "find-device")
        tc.advance(240)
        for a in fast:
            _check(s, event, a, "find-device", "passed")
        assert room.stuck(ctx, room.load_facts(ctx, s, event)) == {}
        tc.advance(300)  # slow: 540 s on a step the room did in 240 s (2 x 240 = 480, min 300)
        flags = room.stuck(ctx, room.load_facts(ctx, s, event))
        assert set(flags) == {slow.id} and flags[slow.id].reasons == ("slow",)
        public = room.stuck_public(room.load_facts(ctx, s, event), flags)
        assert public[0]["name"] == "slow" and public[0]["typical_s"] == 240


def test_pacing_with_the_clock_moved(app: FastAPI, event: Event, tc: TestClock) -> None:
    """Locked steps stay locked however long the room waits; advancing opens the next one, and the
    time on a step counts from when the attendee opened it, not from when it unlocked."""
    ctx = app.state.ctx
    lab = ctx.catalog.labs[LAB]
    with Session(ctx.engine, expire_on_commit=False) as s:
        ev = s.get(Event, event.id)
        assert ev is not None
        ada = _attendee(s, ev, "Ada")
        room.set_pace(ctx, s, event=ev, lab=lab, unlocked=1)
        assert [is_locked(ev, lab, i) for i in range(5)] == [False, True, True, True, True]
        tc.advance(3600)
        assert is_locked(ev, lab, 1)
        room.set_pace(ctx, s, event=ev, lab=lab, unlocked=2)
        assert not is_locked(ev, lab, 1) and is_locked(ev, lab, 2)
        tc.advance(60)
        _open(s, ada, "run-script")
        tc.advance(45)
        facts = room.load_facts(ctx, s, ev)
        assert room.grid(facts)["labs"][0]["unlocked"] == 2
        assert next(r for r in room.export_rows(facts) if r["step"] == "run-script")["time_spent_s"] == 45
        room.set_pace(ctx, s, event=ev, lab=lab, unlocked=None)
        assert ev.pace == {} and not is_locked(ev, lab, 4)


def test_completion_series_and_chart(app: FastAPI, event: Event, tc: TestClock) -> None:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as s:
        for i in range(3):
            a = _attendee(s, event, f"a{i}")
            _open(s, a, "find-device")
            tc.advance(60)
            _check(s, event, a, "find-device", "passed")
        facts = room.load_facts(ctx, s, event)
    data = series(facts, LAB)
    assert len(data[(LAB, "find-device")]) == 3 and data[(LAB, "run-script")] == []
    svg = chart_svg(facts, LAB)
    assert svg.count("<polyline") == 5 and "Find your device" in svg
