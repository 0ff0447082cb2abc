"""Progress: a step is passed when it has a passing check run (*imported* when it only has an imported
one, see services/reporting/progress_io.py). Also the time an attendee first opened a step; pacing (locked
steps: ``is_locked``, ``unlocked_steps``) lives in services/dashboard/pacing.py and is read from here too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from labserver.content import Lab
from labserver.live import Kind
from labserver.models import NOT_ATTEMPTS, CheckRun, CheckStatus, Event, StepStart
from labserver.services.context import AppContext
from labserver.services.dashboard import grid_deltas
from labserver.services.dashboard.pacing import is_locked

#: runs that are no attempt: still running, or cut short by a server restart (services/operations/recovery.py)


@dataclass
class StepProgress:
    id: str
    status: str = "not-started"  # not-started | working | failing | passed | error | imported
    attempts: int = 0
    passed_at: str | None = None
    last_message: str = ""
    locked: bool = False


@dataclass
class LabProgress:
    lab: str
    steps: list[StepProgress] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(1 for s in self.steps if s.status == "passed")

    def as_dict(self) -> dict[str, Any]:
        return {
            "lab": self.lab,
            "passed": self.passed,
            "total": len(self.steps),
            "steps": [s.__dict__ for s in self.steps],
        }


def lab_progress(session: Session, *, event: Event, attendee_id: int, lab: Lab) -> LabProgress:
    runs = session.exec(
        select(CheckRun)
        .where(CheckRun.attendee_id == attendee_id, CheckRun.lab_id == lab.id)
        .order_by(col(CheckRun.id))
    ).all()
    starts = {
        s.step_id
        for s in session.exec(
            select(StepStart).where(StepStart.attendee_id == attendee_id, StepStart.lab_id == lab.id)
        ).all()
    }
    by_step: dict[str, list[CheckRun]] = {}
    for run in runs:
        by_step.setdefault(run.step_id, []).append(run)
    result = LabProgress(lab.id)
    for step in lab.steps:
        sp = StepProgress(step.id, locked=is_locked(event, lab, step.index))
        step_runs = [r for r in by_step.get(step.id, []) if r.status not in NOT_ATTEMPTS]
        sp.attempts = len(step_runs)
        first_pass = next((r for r in step_runs if r.status == CheckStatus.passed), None)
        first_import = next((r for r in step_runs if r.status == CheckStatus.imported), None)
        if first_pass is not None:
            sp.status = "passed"
            sp.passed_at = (first_pass.finished_at or first_pass.created_at).isoformat()
        elif first_import is not None:  # shown as its own state, never as passed
            sp.status = "imported"
            sp.passed_at = (first_import.finished_at or first_import.created_at).isoformat()
        elif step_runs:
            last = step_runs[-1]
            sp.status = "error" if last.status == CheckStatus.error else "failing"
            sp.last_message = last.message[:200]
        elif step.id in starts:
            sp.status = "working"
        result.steps.append(sp)
    return result


def mark_step_started(session: Session, *, attendee_id: int, lab_id: str, step_id: str) -> None:
    exists = session.exec(
        select(StepStart).where(
            StepStart.attendee_id == attendee_id, StepStart.lab_id == lab_id, StepStart.step_id == step_id
        )
    ).first()
    if exists:
        return
    session.add(StepStart(attendee_id=attendee_id, lab_id=lab_id, step_id=step_id))
    try:
        session.commit()
    except IntegrityError:  # two tabs at once
        session.rollback()


def open_step(
    ctx: AppContext, session: Session, *, event: Event, attendee_id: int, lab_id: str, step_id: str
) -> None:
    """The attendee opened a step: store the first time (committed), then publish ``step.opened``
    (with the grid's cell when a dashboard is open: services/dashboard/grid_deltas.py). Blocking."""
    mark_step_started(session, attendee_id=attendee_id, lab_id=lab_id, step_id=step_id)
    grid = grid_deltas.cell_after_commit(
        ctx, session, event, attendee_id=attendee_id, lab=lab_id, step=step_id
    )
    extra = {"grid": grid} if grid is not None else {}
    ctx.live.publish(Kind.step_opened, event.id or 0, attendee_id, lab=lab_id, step=step_id, **extra)
