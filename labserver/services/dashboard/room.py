"""The instructor's view of a room: the progress grid (attendees x steps), per-cell deltas for the live
stream, per-step summaries and the funnel, stuck flags, results export and completion over time.

Everything is computed from a few queries loaded once into :class:`RoomFacts`: attendees, check runs
aggregated in SQL to one row per (attendee, step), step starts, environment states.

Grid payload (``grid()``), compact on purpose:
``columns`` lists ``[lab_id, step_id]`` in event order; ``attendees`` holds ``[id, name, env_state]``;
``cells`` holds only touched cells as ``[attendee_id, column, status, attempts, t0, t1]`` where
``status`` is one of :data:`CELL_CODES` values, ``t0`` the start and ``t1`` the first pass in seconds
since ``base`` (``t1`` is ``null`` until passed). A cell delta on the stream is the same list.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from labserver import clock
from labserver.content import Lab
from labserver.live import Kind
from labserver.models import NOT_ATTEMPTS, Attendee, CheckRun, Environment, Event, StepStart
from labserver.services.context import AppContext
from labserver.services.dashboard.pacing import unlocked_steps
from labserver.services.dashboard.stuck import StepKey, StepSummary, StuckFlag, detect_stuck_steps
from labserver.services.provisioning.environments import event_labs

#: status -> one-letter code used in the payload (not started cells are absent)
CELL_CODES = {"working": "w", "failing": "f", "passed": "p", "error": "e", "imported": "i"}
STATUSES = ("not-started", "working", "failing", "passed", "error", "imported")


def aware(t: dt.datetime) -> dt.datetime:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


@dataclass
class Cell:
    status: str  # working | failing | passed | error | imported
    attempts: int
    start: dt.datetime
    passed_at: dt.datetime | None = None

    def seconds(self, now: dt.datetime) -> float:
        end = self.passed_at or now
        return max(0.0, (end - self.start).total_seconds())


@dataclass
class StepRow:
    """One attendee on one step, as the aggregate query returns it."""

    attendee_id: int
    lab: str
    step: str
    start: dt.datetime | None  # earliest of: opened the step, first check
    first_pass: dt.datetime | None
    attempts: int  # finished checks
    failed: int  # failed checks (never passed: all of them are "in a row", errors skipped)
    last_failed_id: int | None
    last_error_id: int | None
    first_import: dt.datetime | None = None  # an imported run (progress file), never a pass


def cell_of(row: StepRow) -> Cell | None:
    if row.start is None:
        return None
    if row.first_pass is not None:
        return Cell("passed", row.attempts, row.start, row.first_pass)
    if row.first_import is not None:
        return Cell("imported", row.attempts, row.start, row.first_import)
    if row.attempts:
        error_last = (row.last_error_id or 0) > (row.last_failed_id or 0)
        return Cell("error" if error_last else "failing", row.attempts, row.start)
    return Cell("working", 0, row.start)


@dataclass
class RoomFacts:
    event: Event
    labs: list[Lab]
    attendees: list[Attendee]
    steps: list[StepRow]
    env_states: dict[int, str] = field(default_factory=dict)
    now: dt.datetime = field(default_factory=clock.now)
    _cells: dict[tuple[int, StepKey], Cell] | None = None

    @property
    def columns(self) -> list[StepKey]:
        return [(lab.id, step.id) for lab in self.labs for step in lab.steps]

    def cells(self) -> dict[tuple[int, StepKey], Cell]:
        if self._cells is None:
            self._cells = {}
            for row in self.steps:
                cell = cell_of(row)
                if cell is not None:
                    self._cells[(row.attendee_id, (row.lab, row.step))] = cell
        return self._cells

    def summaries(self) -> list[StepSummary]:
        return [
            StepSummary(
                r.attendee_id,
                r.lab,
                r.step,
                r.start,
                r.first_pass,
                0 if r.first_pass is not None else r.failed,
            )
            for r in self.steps
        ]


def _when(t: dt.datetime | None) -> dt.datetime | None:
    return None if t is None else aware(t)


def load_facts(
    ctx: AppContext, session: Session, event: Event, *, attendee_id: int | None = None
) -> RoomFacts:
    """Everything the room views need: attendees, one aggregate row per (attendee, step) touched
    (check runs grouped in SQL, so no log or per-run row leaves the database), step starts and
    environment states (one attendee when ``attendee_id``)."""
    labs = [ctx.catalog.labs[lab_id] for lab_id in event_labs(ctx, event)]
    status = col(CheckRun.status)
    run_id = col(CheckRun.id)
    q_att = select(Attendee).where(col(Attendee.event_id) == event.id).order_by(col(Attendee.id))
    q_runs = (
        sa_select(
            col(CheckRun.attendee_id),
            col(CheckRun.lab_id),
            col(CheckRun.step_id),
            func.min(col(CheckRun.created_at)),
            func.min(case((status == "passed", col(CheckRun.finished_at)))),
            func.count(case((status.not_in([str(s) for s in NOT_ATTEMPTS]), 1))),
            func.count(case((status == "failed", 1))),
            func.max(case((status == "failed", run_id))),
            func.max(case((status.in_(["error", "timeout"]), run_id))),
            func.min(case((status == "imported", col(CheckRun.finished_at)))),
        )
        .where(col(CheckRun.event_id) == event.id)
        .group_by(col(CheckRun.attendee_id), col(CheckRun.lab_id), col(CheckRun.step_id))
    )
    q_starts = (
        sa_select(
            col(StepStart.attendee_id),
            col(StepStart.lab_id),
            col(StepStart.step_id),
            col(StepStart.started_at),
        )
        .join(Attendee, col(Attendee.id) == StepStart.attendee_id)
        .where(col(Attendee.event_id) == event.id)
    )
    q_env = sa_select(col(Environment.attendee_id), col(Environment.state)).where(
        col(Environment.event_id) == event.id
    )
    if attendee_id is not None:
        q_att = q_att.where(col(Attendee.id) == attendee_id)
        q_runs = q_runs.where(col(CheckRun.attendee_id) == attendee_id)
        q_starts = q_starts.where(col(StepStart.attendee_id) == attendee_id)
        q_env = q_env.where(col(Environment.attendee_id) == attendee_id)
    rows: dict[tuple[int, str, str], StepRow] = {}
    for (
        a,
        lab,
        step,
        first_run,
        first_pass,
        attempts,
        failed,
        last_failed,
        last_error,
        first_import,
    ) in session.execute(q_runs).all():
        rows[(a, lab, step)] = StepRow(
            a,
            lab,
            step,
            _when(first_run),
            _when(first_pass),
            attempts,
            failed,
            last_failed,
            last_error,
            _when(first_import),
        )
    for a, lab, step, at in session.execute(q_starts).all():
        at = aware(at)
        row = rows.get((a, lab, step))
        if row is None:
            rows[(a, lab, step)] = StepRow(a, lab, step, at, None, 0, 0, None, None)
        elif row.start is None or at < row.start:
            row.start = at
    return RoomFacts(
        event=event,
        labs=labs,
        attendees=list(session.exec(q_att).all()),
        steps=list(rows.values()),
        env_states={a: str(s) for a, s in session.execute(q_env).all()},
    )


def base_time(event: Event) -> int:
    return int(aware(event.created_at).timestamp())


def encode_cell(attendee_id: int, column: int, cell: Cell, base: int) -> list[Any]:
    return [
        attendee_id,
        column,
        CELL_CODES[cell.status],
        cell.attempts,
        int(cell.start.timestamp()) - base,
        None if cell.passed_at is None else int(cell.passed_at.timestamp()) - base,
    ]


def grid(facts: RoomFacts, lang: str = "en") -> dict[str, Any]:
    """The whole grid, compact (see the module docstring)."""
    base = base_time(facts.event)
    index = {key: i for i, key in enumerate(facts.columns)}
    cells = [
        encode_cell(a, index[key], cell, base)
        for (a, key), cell in sorted(facts.cells().items(), key=lambda kv: (kv[0][0], index.get(kv[0][1], 0)))
        if key in index
    ]
    return {
        "event": {"id": facts.event.id, "title": facts.event.title, "code": facts.event.code},
        "base": base,
        "now": int(facts.now.timestamp()) - base,
        "labs": [
            {
                "id": lab.id,
                "title": lab.spec.title.get(lang),
                "unlocked": facts.event.pace.get(lab.id),
                "steps": [[s.id, s.spec.title.get(lang)] for s in lab.steps],
            }
            for lab in facts.labs
        ],
        "columns": [list(k) for k in facts.columns],
        "attendees": [[a.id, a.name, facts.env_states.get(a.id or 0, "none")] for a in facts.attendees],
        "cells": cells,
    }


def summaries(facts: RoomFacts) -> list[dict[str, Any]]:
    """Per step (event order): how many attendees are in each status, and the funnel figure ``reached``
    (passed this step or any later one of the same lab)."""
    counts = {key: dict.fromkeys(STATUSES, 0) for key in facts.columns}
    passed_by: dict[int, set[StepKey]] = {}
    for (a, key), cell in facts.cells().items():
        if key in counts:
            counts[key][cell.status] += 1
            if cell.status == "passed":
                passed_by.setdefault(a, set()).add(key)
    total = len(facts.attendees)
    out = []
    for lab in facts.labs:
        for i, step in enumerate(lab.steps):
            key = (lab.id, step.id)
            later = {(lab.id, s.id) for s in lab.steps[i:]}
            reached = sum(1 for keys in passed_by.values() if keys & later)
            row = counts[key]
            row["not-started"] = total - sum(v for k, v in row.items() if k != "not-started")
            out.append({"lab": lab.id, "step": step.id, **row, "reached": reached, "total": total})
    return out


def expected_times(labs: Iterable[Lab]) -> dict[StepKey, float]:
    """A step's expected time before the room has data: the lab's duration spread over its steps."""
    return {
        (lab.id, s.id): lab.spec.duration_min * 60.0 / max(1, len(lab.steps))
        for lab in labs
        for s in lab.steps
    }


def stuck(ctx: AppContext, facts: RoomFacts) -> dict[int, StuckFlag]:
    return detect_stuck_steps(
        facts.summaries(),
        now=facts.now,
        settings=ctx.settings.stuck,
        expected_s=expected_times(facts.labs),
    )


def stuck_public(facts: RoomFacts, flags: dict[int, StuckFlag]) -> list[dict[str, Any]]:
    names = {a.id: a.name for a in facts.attendees}
    return [
        {
            "attendee_id": f.attendee_id,
            "name": names.get(f.attendee_id, "?"),
            "lab": f.lab,
            "step": f.step,
            "reasons": list(f.reasons),
            "seconds_on_step": round(f.seconds_on_step),
            "typical_s": None if f.typical_s is None else round(f.typical_s),
            "failures_in_a_row": f.failures_in_a_row,
        }
        for f in sorted(flags.values(), key=lambda f: -f.seconds_on_step)
    ]


def attendee_cells(facts: RoomFacts, attendee_id: int, keys: Iterable[StepKey]) -> list[list[Any]]:
    """Encoded cells of one attendee for ``keys`` (a step with no activity comes back as status ``n``)."""
    base = base_time(facts.event)
    index = {key: i for i, key in enumerate(facts.columns)}
    cells = facts.cells()
    out: list[list[Any]] = []
    for key in keys:
        if key not in index:
            continue
        cell = cells.get((attendee_id, key))
        out.append(
            [attendee_id, index[key], "n", 0, None, None]
            if cell is None
            else encode_cell(attendee_id, index[key], cell, base)
        )
    return out


# -- export -----------------------------------------------------------------------------------------
EXPORT_FIELDS = ("attendee", "attendee_id", "lab", "step", "status", "passed_at", "attempts", "time_spent_s")


def export_rows(facts: RoomFacts) -> list[dict[str, Any]]:
    """One row per attendee x step of the event (untouched steps included, status ``not-started``)."""
    cells = facts.cells()
    rows = []
    for a in facts.attendees:
        for key in facts.columns:
            cell = cells.get((a.id or 0, key))
            rows.append(
                {
                    "attendee": a.name,
                    "attendee_id": a.id,
                    "lab": key[0],
                    "step": key[1],
                    "status": cell.status if cell else "not-started",
                    "passed_at": cell.passed_at.isoformat() if cell and cell.passed_at else None,
                    "attempts": cell.attempts if cell else 0,
                    "time_spent_s": round(cell.seconds(facts.now)) if cell else 0,
                }
            )
    return rows


#: a cell starting with one of these is a formula to a spreadsheet (``=HYPERLINK(...)`` in a name)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """``value`` safe for a spreadsheet: a text that would start a formula gets a leading ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return "" if value is None else value


def export_csv(facts: RoomFacts) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=EXPORT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in export_rows(facts):
        writer.writerow({k: csv_cell(v) for k, v in row.items()})
    return buf.getvalue()


# -- pacing -----------------------------------------------------------------------------------------
def set_pace(ctx: AppContext, session: Session, *, event: Event, lab: Lab, unlocked: int | None) -> Event:
    """Lock the lab's steps beyond ``unlocked`` for the whole room (None: unlock all), then publish
    ``pace``. Enforced by :func:`labserver.services.dashboard.pacing.is_locked`."""
    pace = dict(event.pace)
    if unlocked is None or unlocked >= len(lab.steps):
        pace.pop(lab.id, None)
    else:
        pace[lab.id] = max(0, unlocked)
    event.pace = pace
    session.add(event)
    session.commit()
    session.refresh(event)
    ctx.live.publish(
        Kind.pace,
        event.id or 0,
        None,
        lab=lab.id,
        unlocked=unlocked_steps(event, lab),
        total=len(lab.steps),
    )
    return event
