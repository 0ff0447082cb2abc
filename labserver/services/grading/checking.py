"""The Check button: run a step's checker against the attendee's environment, commit the result,
then publish it (the press and the result are marked in the terminal's recording too). The request comes from :func:`labserver.checks.request.check_request`; the
environment row is trusted (:func:`~labserver.services.provisioning.environments.with_environment`), so a check
costs one status poll (the backend's own, before it runs the checker), not two.

A check the platform could not run (:mod:`labserver.services.grading.not_gradable`) is committed and
published as ``not_gradable`` and pressed again at once, under the same lock: the attendee sees
"not your fault, retried", then the retry's own result.

From its row's commit until its result's, a run's id is in ``ctx.checks_in_flight``: a ``running``
row that is not is one nothing will finish, and :mod:`labserver.services.operations.recovery` closes it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlmodel import Session, col, select

from labserver import clock
from labserver.backends.base import BackendError, CheckRaw, EnvRef
from labserver.backends.meter import ProcessMeter
from labserver.checks.request import check_request
from labserver.checks.verdict import LOAD, Verdict, interpret
from labserver.content import Lab, Step
from labserver.db import in_thread, release
from labserver.live import Kind
from labserver.models import Attendee, CheckFiles, CheckRun, CheckStatus, Event
from labserver.observability import metrics
from labserver.services.context import AppContext
from labserver.services.dashboard import grid_deltas
from labserver.services.grading import check_files, not_gradable
from labserver.services.provisioning import workspace_full
from labserver.services.provisioning.environments import with_environment
from labserver.services.support import recordings

log = logging.getLogger(__name__)


def runs_of(
    session: Session, *, attendee_id: int, lab_id: str = "", step_id: str = "", limit: int = 50
) -> Sequence[CheckRun]:
    """The attendee's check runs, newest first (of one lab and step when given)."""
    q = select(CheckRun).where(CheckRun.attendee_id == attendee_id)
    if lab_id:
        q = q.where(CheckRun.lab_id == lab_id)
    if step_id:
        q = q.where(CheckRun.step_id == step_id)
    return session.exec(q.order_by(col(CheckRun.id).desc()).limit(limit)).all()


def publish_finished(ctx: AppContext, run: CheckRun, attendee: Attendee, **extra: object) -> None:
    """Tell the attendee's page and the instructor grid that ``run`` (already committed) finished."""
    ctx.live.publish(
        Kind.check_finished,
        run.event_id,
        attendee.id,
        run_id=run.id,
        lab=run.lab_id,
        step=run.step_id,
        status=str(run.status),
        message=run.message[:300],
        name=attendee.name,
        **extra,
    )


@asynccontextmanager
async def check_slot(
    ctx: AppContext,
    *,
    event_id: int,
    attendee_id: int,
    run_id: int | None,
    lab: str,
    step: str,
    meter: ProcessMeter | None = None,
) -> AsyncIterator[None]:
    """A check slot from the fair queue (services/grading/fair_queue.py); while waiting, the attendee's page
    gets ``check.queued`` with the position (1 = next). ``meter`` reads what the check uses once
    it runs (a check that uses no CPU lends its slot)."""
    if ctx.check_queue is None:
        async with ctx.check_slots:
            yield
        return

    def tell(position: int) -> None:
        ctx.live.publish(
            Kind.check_queued, event_id, attendee_id, run_id=run_id, lab=lab, step=step, position=position
        )

    async with ctx.check_queue.slot(attendee_id, on_position=tell, meter=meter):
        yield


async def run_check(
    ctx: AppContext,
    session: Session,
    *,
    event: Event,
    attendee: Attendee,
    lab: Lab,
    step: Step,
    lang: str = "en",
    retried: bool = False,
) -> CheckRun:
    """Run the step's checker once, and once more when the platform could not run it (unless
    ``retried``: this is already the retry); returns the last run, committed and published."""
    assert event.id is not None and attendee.id is not None
    release(session)  # the caller's reads end before waiting for the attendee's check lock
    async with ctx.check_lock(attendee.id):
        run = await _check_once(
            ctx, session, event=event, attendee=attendee, lab=lab, step=step, lang=lang, retried=retried
        )
        if run.status == CheckStatus.not_gradable and not retried:
            run = await _check_once(
                ctx, session, event=event, attendee=attendee, lab=lab, step=step, lang=lang, retried=True
            )
        return run


async def _check_once(
    ctx: AppContext,
    session: Session,
    *,
    event: Event,
    attendee: Attendee,
    lab: Lab,
    step: Step,
    lang: str,
    retried: bool,
) -> CheckRun:
    assert event.id is not None and attendee.id is not None
    event_id, attendee_id = event.id, attendee.id

    files: list[dict[str, object]] = []  # digests of the lab folder a pass judged (completion records)

    async def attempt(ref: EnvRef) -> tuple[CheckRaw, Verdict]:
        meter = ProcessMeter()  # what the check's processes use: the queue and blame() read it
        request = check_request(
            lab, step, ref, lang=lang, log_limit=ctx.settings.checks.log_limit_bytes, meter=meter
        )
        async with check_slot(
            ctx,
            event_id=event_id,
            attendee_id=attendee_id,
            run_id=run.id,
            lab=lab.id,
            step=step.id,
            meter=meter,
        ):
            raw = await ctx.backend.run_check(ref, request)
        verdict = interpret(raw, request.timeout_s, usage=meter.last, cost_s=lab.costs.get(step.id))
        if verdict.status == CheckStatus.passed:
            files[:] = await check_files.digest_lab(ctx, ref, lab.id)
        return raw, verdict

    run = CheckRun(event_id=event.id, attendee_id=attendee.id, lab_id=lab.id, step_id=step.id)
    await in_thread(_store, session, run)
    assert run.id is not None
    ctx.checks_in_flight.add(run.id)  # until its result is committed (services/operations/recovery.py)
    try:
        crash = await _judge(
            ctx, session, run, event=event, attendee=attendee, attempt=attempt, lang=lang, retried=retried
        )
        run.finished_at = clock.now()
        # committed before anyone sees it; the grid's cell read in the same thread job
        grid = await in_thread(_store, session, run, files, grid_of=(ctx, event))
    finally:
        # cancelled before the commit (the server stops): the row stays ``running``, and recovery
        # finishes it and presses Check again, as for a server that died
        ctx.checks_in_flight.discard(run.id)
    metrics.check_finished(run)
    publish_finished(ctx, run, attendee, **({"grid": grid} if grid is not None else {}))
    recordings.mark(ctx, event_id=event_id, attendee_id=attendee_id, lab=lab.id, label=result_label(run))
    if crash is not None:
        raise crash
    return run


async def _judge(
    ctx: AppContext,
    session: Session,
    run: CheckRun,
    *,
    event: Event,
    attendee: Attendee,
    attempt: Callable[[EnvRef], Awaitable[tuple[CheckRaw, Verdict]]],
    lang: str,
    retried: bool,
) -> Exception | None:
    """Run the check and write its outcome into ``run`` (not committed). Returns the exception the
    caller raises once the run is committed: a fault of ours, the run recorded as ``error``."""
    assert event.id is not None and attendee.id is not None
    event_id, attendee_id = event.id, attendee.id
    try:
        ctx.live.publish(
            Kind.check_started, event_id, attendee_id, run_id=run.id, lab=run.lab_id, step=run.step_id
        )
        recordings.mark(
            ctx, event_id=event_id, attendee_id=attendee_id, lab=run.lab_id, label=f"Check {run.step_id}"
        )
        # the row is trusted; the backend polls the engine once before the check (run_check)
        raw, verdict = await with_environment(ctx, session, event=event, attendee=attendee, action=attempt)
        run.status = verdict.status
        run.message = verdict.message
        if verdict.status == CheckStatus.not_gradable:  # a timeout the machine caused (checks/timeouts.py)
            log.warning(
                "check %s of attendee %s not gradable (%s%s): timed out after %.1f s, starved of CPU",
                run.id,
                attendee_id,
                LOAD,
                ", after the retry" if retried else "",
                raw.duration_s,
            )
            run.message = not_gradable.message(lang, LOAD, retried=retried)
        if run.status != CheckStatus.passed and workspace_full.NO_SPACE in raw.log:
            run.message = workspace_full.message(lang, getattr(ctx.backend, "workspace_mb", 0))
        run.hints = verdict.hints
        run.metrics = verdict.metrics
        run.tables = verdict.tables
        run.log = raw.log.decode("utf-8", "replace")
        run.log_truncated = raw.log_truncated
        run.exit_code = raw.exit_code
        run.duration_s = raw.duration_s
        # what the checker reported (measured on a timeout), else what the backend measured
        run.cpu_s = verdict.cpu_s if verdict.cpu_s is not None else raw.cpu_s
    except BackendError as exc:
        if not_gradable.is_platform_fault(exc):
            log.warning(
                "check %s of attendee %s not gradable (%s%s): %s %s",
                run.id,
                attendee_id,
                exc.reason,
                ", after the retry" if retried else "",
                exc.message,
                exc.log,
            )
            run.status = CheckStatus.not_gradable
            run.message = not_gradable.message(lang, exc.reason, retried=retried)
            run.log = f"[labserver] the platform could not run this check ({exc.reason}): {exc.message}\n"
        else:
            run.status = CheckStatus.error
            run.message = exc.message
    except Exception as exc:  # never leave a run "running"
        run.status = CheckStatus.error
        run.message = f"The check could not run: {exc}"
        return exc
    return None


def _store(
    session: Session,
    run: CheckRun,
    files: list[dict[str, object]] | None = None,
    *,
    grid_of: tuple[AppContext, Event] | None = None,
) -> dict[str, Any] | None:
    """Commit ``run`` and release the connection, in a worker thread: a commit that waits for the
    database (SQLite's write lock, a pool checkout) must never hold up the event loop every stream
    and terminal of the room is served from (the load rehearsal, bench/rehearsal.py). With
    ``grid_of`` (a finished run), the grid's cell after the commit is read in the same session
    and returned (services/dashboard/grid_deltas.py: None when no dashboard is open)."""
    session.add(run)
    if files is not None and run.status == CheckStatus.passed and run.id is not None:
        session.add(CheckFiles(run_id=run.id, files=files))
    session.commit()
    session.refresh(run)
    grid = None
    if grid_of is not None:
        ctx, event = grid_of
        grid = grid_deltas.cell_after_commit(
            ctx, session, event, attendee_id=run.attendee_id, lab=run.lab_id, step=run.step_id, run=run
        )
    release(session)
    return grid


def result_label(run: CheckRun) -> str:
    """The recording's marker for a check's result: ``<step>: <status>: <message, first line>``."""
    first = run.message.strip().splitlines()[0][:120] if run.message.strip() else ""
    return f"{run.step_id}: {run.status}" + (f": {first}" if first else "")
