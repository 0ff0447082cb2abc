"""After a crash (issue 13 item 9): what a server that died mid-work left behind, cleaned up at start.

- **Orphaned check runs.** A run is ``running`` from the moment the Check button is pressed until
  its result is committed; a server killed in between leaves it ``running`` forever (the attendee's
  page waits, the grid shows a check in progress). At start, before anything else can start a check,
  every ``running`` row is finished as ``not_gradable`` (the platform's fault:
  services/grading/not_gradable.py) with a message saying it does not count and is retried; once the
  environments are re-adopted, each such check is pressed again for the attendee, once
  (:func:`retry_orphaned_runs`, all at once through the check queue). ``not_gradable`` (and
  ``interrupted``, what older servers wrote) costs the attendee nothing: it is not an attempt
  (``models.NOT_ATTEMPTS``), not a failure, and does not feed the stuck detector.
- **Runs orphaned while this server runs.** The rule behind the start's sweep holds all the time:
  a run is ``running`` only while a task of this server runs it (``AppContext.checks_in_flight``,
  kept by services/grading/checking.py; one server per database, as every deployment runs). A row that
  breaks it (a check task cancelled before its commit, a commit of a dying server's that landed
  after the start's sweep) is finished and pressed again the same way by :func:`sweep_orphaned_runs`,
  from the housekeeping loop: :func:`orphans` decides, clock-free, on two sweeps in a row (a row
  committed a moment before its task registers it is never taken).
- **Leaked grader containers.** A check on the Docker backend runs in a grader container labelled
  ``labserver.role=grader`` with this server's instance label; at start no check of this server can
  be running, so every such grader is a leftover and is removed (the backend's ``stale_graders`` /
  ``remove_container``; backends without graders have nothing to reap).

The start's steps are called from the app's lifespan (labserver/app.py), the sweep from
services/operations/lifecycle.py. Tests: tests/services/test_recovery.py (a real ``kill -9`` of a server
subprocess while a room presses Check; the sweep; a cancelled check),
tests/backends/docker/test_crash_recovery.py (the same on Docker, with its grader).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence, Set
from typing import Any, cast

from sqlalchemy import CursorResult, update
from sqlmodel import Session, col, select

from labserver import clock
from labserver.backends.base import Backend
from labserver.db import in_thread, release
from labserver.models import Attendee, CheckRun, CheckStatus, Event
from labserver.services.context import AppContext
from labserver.services.grading import checking, not_gradable

log = logging.getLogger(__name__)


def finish_orphaned_runs(session: Session, only: Collection[int] | None = None) -> list[int]:
    """Finish every ``running`` check run (of ``only``, when given) as ``not_gradable`` (committed,
    one message per attendee's language); returns their ids, oldest first, for
    :func:`retry_orphaned_runs`. A row finished meanwhile is left as it is."""
    q = (
        select(CheckRun.id, Attendee.lang)
        .join(Attendee, col(Attendee.id) == CheckRun.attendee_id)
        .where(col(CheckRun.status) == CheckStatus.running)
        .order_by(col(CheckRun.id))
    )
    if only is not None:
        q = q.where(col(CheckRun.id).in_(list(only)))
    rows = session.exec(q).all()
    now = clock.now()
    finished: list[int] = []
    for run_id, lang in rows:
        done = session.execute(
            update(CheckRun)
            .where(col(CheckRun.id) == run_id, col(CheckRun.status) == CheckStatus.running)
            .values(
                status=CheckStatus.not_gradable,
                message=not_gradable.message(lang or "en", "restart", retried=False),
                log="[labserver] the server restarted during this check\n",
                finished_at=now,
            )
        )
        if run_id is not None and cast("CursorResult[Any]", done).rowcount:
            finished.append(int(run_id))
    session.commit()
    if finished:
        log.warning(
            "%d check run(s) left running by a server that stopped finished as not gradable", len(finished)
        )
    return finished


def orphans(running: Set[int], in_flight: Set[int], unowned_before: Set[int]) -> tuple[set[int], set[int]]:
    """Which ``running`` rows no task of this server will finish: ``(close, unowned)``. A row not in
    flight is *unowned*; it is closed when it was unowned at the previous sweep too, so a row seen
    between its commit and its task's registration (services/grading/checking.py) is never taken, and no
    clock is needed. ``unowned`` is what the next sweep gets as ``unowned_before``."""
    unowned = set(running) - set(in_flight)
    close = unowned & set(unowned_before)
    return close, unowned - close


async def sweep_orphaned_runs(ctx: AppContext) -> list[int]:
    """One sweep (module docstring): finish the runs :func:`orphans` names and press them again in
    the background; returns the ids finished."""

    def running_ids() -> set[int]:
        with Session(ctx.engine) as session:
            rows = session.exec(select(CheckRun.id).where(col(CheckRun.status) == CheckStatus.running)).all()
            return {int(r) for r in rows if r is not None}

    running = await in_thread(running_ids)
    close, ctx.unowned_runs = orphans(running, ctx.checks_in_flight, ctx.unowned_runs)
    if not close:
        return []

    def finish() -> list[int]:
        with Session(ctx.engine) as session:
            return finish_orphaned_runs(session, only=close)

    finished = await in_thread(finish)
    if finished:
        retry = asyncio.ensure_future(retry_orphaned_runs(ctx, finished))
        ctx.background.add(retry)
        retry.add_done_callback(ctx.background.discard)
    return finished


async def retry_orphaned_runs(ctx: AppContext, run_ids: Sequence[int]) -> int:
    """Press Check again, once, for each run a restart cut short (call after ``reconcile``, so the
    environments are re-adopted), all at once: they queue for check slots like any press. Skipped
    when the lab or the step is gone, or when the attendee has checked that step since. Returns how
    many were retried. The database is read in short sessions, none held across a check."""
    done = await asyncio.gather(*(_retry(ctx, run_id) for run_id in run_ids))
    return sum(done)


async def _retry(ctx: AppContext, run_id: int) -> bool:
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
            return False
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
        except Exception:  # one attendee's retry must not stop the others'
            log.exception("retrying check run %s after the restart failed", run_id)
            return False
        return True


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
