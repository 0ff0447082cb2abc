"""After a crash (issue 13 item 9): what a server that died mid-work left behind, cleaned up at start.

- **Orphaned check runs.** A run is ``running`` from the moment the Check button is pressed until
  its result is committed; a server killed in between leaves it ``running`` forever (the attendee's
  page waits, the grid shows a check in progress). At start, before anything else can start a check,
  every ``running`` row is finished as ``not_gradable`` (the platform's fault:
  services/not_gradable.py) with a message saying it does not count and is retried; once the
  environments are re-adopted, each such check is pressed again for the attendee, once
  (:func:`retry_orphaned_runs`). ``not_gradable`` (and ``interrupted``, what older servers wrote)
  costs the attendee nothing: it is not an attempt (``models.NOT_ATTEMPTS``), not a failure, and
  does not feed the stuck detector.
- **Leaked grader containers.** A check on the Docker backend runs in a grader container labelled
  ``labserver.role=grader`` with this server's instance label; at start no check of this server can
  be running, so every such grader is a leftover and is removed (the backend's ``stale_graders`` /
  ``remove_container``; backends without graders have nothing to reap).

Both are called from the app's lifespan (labserver/app.py). Tests: tests/services/test_recovery.py
(a real ``kill -9`` of a server subprocess during a check).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import update
from sqlmodel import Session, col, select

from labserver import clock
from labserver.backends.base import Backend
from labserver.db import release
from labserver.models import Attendee, CheckRun, CheckStatus, Event
from labserver.services import checking, not_gradable
from labserver.services.context import AppContext

log = logging.getLogger(__name__)


def finish_orphaned_runs(session: Session) -> list[int]:
    """Finish every ``running`` check run as ``not_gradable`` (committed, one message per attendee's
    language); returns their ids, oldest first, for :func:`retry_orphaned_runs`."""
    rows = session.exec(
        select(CheckRun.id, Attendee.lang)
        .join(Attendee, col(Attendee.id) == CheckRun.attendee_id)
        .where(col(CheckRun.status) == CheckStatus.running)
        .order_by(col(CheckRun.id))
    ).all()
    now = clock.now()
    for run_id, lang in rows:
        session.execute(
            update(CheckRun)
            .where(col(CheckRun.id) == run_id, col(CheckRun.status) == CheckStatus.running)
            .values(
                status=CheckStatus.not_gradable,
                message=not_gradable.message(lang or "en", "restart", retried=False),
                log="[labserver] the server restarted during this check\n",
                finished_at=now,
            )
        )
    session.commit()
    if rows:
        log.warning("%d check run(s) left running by a previous server finished as not gradable", len(rows))
    return [int(run_id) for run_id, _ in rows if run_id is not None]


async def retry_orphaned_runs(ctx: AppContext, run_ids: Sequence[int]) -> int:
    """Press Check again, once, for each run a restart cut short (call after ``reconcile``, so the
    environments are re-adopted); skipped when the lab or the step is gone, or when the attendee has
    checked that step since. Returns how many were retried. The database is read in short sessions,
    none held across a check."""
    retried = 0
    for run_id in run_ids:
        with Session(ctx.engine, expire_on_commit=False) as session:
            run = session.get(CheckRun, run_id)
            attendee = session.get(Attendee, run.attendee_id) if run else None
            event = session.get(Event, run.event_id) if run else None
            newer = (
                session.exec(
                    select(CheckRun.id).where(
                        col(CheckRun.attendee_id) == run.attendee_id,
                        col(CheckRun.lab_id) == run.lab_id,
                        col(CheckRun.step_id) == run.step_id,
                        col(CheckRun.id) > run_id,
                    )
                ).first()
                if run
                else None
            )
            release(session)
            lab = ctx.catalog.labs.get(run.lab_id) if run else None
            step = lab.step(run.step_id) if lab and run else None
            if run is None or attendee is None or event is None or step is None or lab is None or newer:
                continue
            try:
                await checking.run_check(
                    ctx,
                    session,
                    event=event,
                    attendee=attendee,
                    lab=lab,
                    step=step,
                    lang=attendee.lang or "en",
                    retried=True,
                )
                retried += 1
            except Exception:  # one attendee's retry must not stop the others'
                log.exception("retrying check run %s after the restart failed", run_id)
    return retried


async def reap_leaked_graders(backend: Backend) -> int:
    """Remove the grader containers a previous server of this instance left behind."""
    stale = getattr(backend, "stale_graders", None)
    remove = getattr(backend, "remove_container", None)
    if stale is None or remove is None:
        return 0
    leaked = await stale(older_than_s=0.0)
    for container in leaked:
        log.warning("removing grader container %s left by a previous server", getattr(container, "name", "?"))
        await remove(container)
    return len(leaked)
