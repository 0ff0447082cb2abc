"""The event's audit log: every staff action that changes an attendee's environment, work or view,
or the event's staff, with who, when, which event and on whom (issue 33).

Lines are written by the one authorization dependency (:func:`labserver.routes.deps.require`)
when a route of an audited action (:data:`labserver.services.staff.roles.AUDITED`) succeeds, and
by the terminal socket when someone types on an accepted share; a route adds what only it knows
(the lab, the step, the message) with :meth:`Acting.note`. So no audited route can forget to
write its line, and a refused or failed action writes none.

The log is kept with the event: lines name the attendee and keep their id without a foreign
key, so removing an attendee keeps what was done to them; it is shown on the event page
(newest first), exported as CSV (``audit.csv``) and inside the event's ``export.zip``."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from labserver.models import AuditEntry
from labserver.services.dashboard.room import csv_cell
from labserver.services.staff.roles import Action, Principal, role_on

#: a note's values are cut to this many characters (a broadcast's text, a file list)
NOTE_MAX = 300


@dataclass
class Acting:
    """One staff request: who, which action, on which event, and on whom (what the log writes)."""

    principal: Principal
    action: Action
    event_id: int | None
    target: str = ""
    attendee_id: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    skip: bool = False  # set by a route that answered without acting (a form sent back with its error)

    @property
    def name(self) -> str:
        return self.principal.name

    def note(self, **detail: Any) -> None:
        """Add what the route knows (lab, step, counts) to this request's audit line."""
        for key, value in detail.items():
            self.detail[key] = (
                value if isinstance(value, int | float | bool) or value is None else str(value)[:NOTE_MAX]
            )


def record(engine: Engine, acting: Acting) -> None:
    """Write ``acting``'s line in a short session of its own (never the request's: it may be
    released, and a line is written only after the action succeeded)."""
    if acting.event_id is None:
        return
    role = role_on(acting.principal.grants, acting.event_id)
    with Session(engine) as session:
        session.add(
            AuditEntry(
                event_id=acting.event_id,
                actor=acting.principal.name[:80],
                actor_id=acting.principal.staff_id,
                role=role.value if role else "",
                action=acting.action.value,
                target=acting.target[:300],
                attendee_id=acting.attendee_id,
                detail=acting.detail,
            )
        )
        session.commit()


def of_event(session: Session, event_id: int, *, limit: int | None = 200) -> list[AuditEntry]:
    """The event's lines, newest first (``limit`` None: all)."""
    query = (
        select(AuditEntry)
        .where(AuditEntry.event_id == event_id)
        .order_by(col(AuditEntry.at).desc(), col(AuditEntry.id).desc())
    )
    if limit is not None:
        query = query.limit(limit)
    return list(session.exec(query).all())


COLUMNS = ("at", "actor", "role", "action", "target", "attendee_id", "detail")


def export_csv(rows: list[AuditEntry]) -> str:
    """The lines as CSV, oldest first; a cell that a spreadsheet would run as a formula starts
    with ``'`` (names and notes come from people)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for row in sorted(rows, key=lambda r: (r.at, r.id or 0)):
        values = [
            row.at.isoformat(),
            row.actor,
            row.role,
            row.action,
            row.target,
            row.attendee_id if row.attendee_id is not None else "",
            json.dumps(row.detail, ensure_ascii=False, sort_keys=True) if row.detail else "",
        ]
        writer.writerow([csv_cell(v) for v in values])
    return out.getvalue()
