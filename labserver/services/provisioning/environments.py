"""One environment per attendee per event: provisioning, state changes (stored, then published),
reset of a lab folder, and reconciliation after a server restart.

- :func:`set_state` is the only writer of ``Environment.state``; it refuses a change
  :data:`~labserver.backends.base.TRANSITIONS` does not allow, commits, then publishes ``env.state``.
- :func:`start_environment` provisions now (polling the engine first); the seam the join flow will
  call in the background. :func:`ensure_environment` is the same with an option to trust the row.
- :func:`with_environment` runs one backend operation on the attendee's environment trusting a
  ``ready`` row (no engine round trip); only when the backend answers :class:`EnvironmentGone` does
  it ask the engine, provision again and retry once. File operations and checks go through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlmodel import Session, select

from labserver import clock
from labserver.backends.base import (
    BackendError,
    EnvironmentGone,
    EnvRef,
    EnvSpec,
    EnvState,
    LabSeed,
    check_transition,
    transition_allowed,
)
from labserver.db import in_thread, release
from labserver.live import Kind
from labserver.models import Attendee, Environment, Event
from labserver.observability import logging_json, metrics
from labserver.services.context import AppContext
from labserver.services.provisioning import env_spec
from labserver.services.provisioning.admission import CAPACITY_REASONS

log = logging.getLogger(__name__)
T = TypeVar("T")

#: row states in which the environment is running and usable (a lab reset keeps the rest usable)
USABLE = (EnvState.ready, EnvState.resetting)


def env_id_for(event_id: int, attendee_id: int) -> str:
    return f"ev{event_id}-at{attendee_id}"


def event_labs(ctx: AppContext, event: Event) -> list[str]:
    """The labs of an event that exist in the catalog, in the event's order (all labs if none set)."""
    if event.labs:
        return [lab_id for lab_id in event.labs if lab_id in ctx.catalog.labs]
    return list(ctx.catalog.labs)


_warned: set[tuple[int | None, str]] = set()


def _warn_once(event: Event, text: str) -> None:
    """A warning about an event's configuration, logged once per event and text (not per join)."""
    if (event.id, text) not in _warned:
        _warned.add((event.id, text))
        log.warning("event %s: %s", event.id, text)


def spec_for(ctx: AppContext, event: Event, attendee: Attendee) -> EnvSpec:
    assert event.id is not None and attendee.id is not None
    labs = [ctx.catalog.labs[lab_id] for lab_id in event_labs(ctx, event)]
    seeds = tuple(LabSeed(lab.id, lab.starter) for lab in labs)
    limits = env_spec.limits_for(labs, ctx.settings.docker)
    if limits.short:
        _warn_once(event, f"labs ask more than the server's limits give: {limits.short}")
    conflicts = env_spec.image_conflicts(labs) if not event.image else []
    if conflicts:
        _warn_once(event, f"labs name different images; set the event's image: {conflicts}")
    network = any(lab.spec.requires.network for lab in labs)
    device = "npu" if any(lab.spec.requires.device == "npu" for lab in labs) else "any"
    return EnvSpec(
        env_id=env_id_for(event.id, attendee.id),
        event_id=event.id,
        attendee_id=attendee.id,
        labs=seeds,
        image=env_spec.image_for(event.image, labs, ctx.settings.docker.image),
        device=device,
        cpus=limits.cpus,
        memory_mb=limits.memory_mb,
        pids=ctx.settings.docker.pids,
        network=network,
    )


def set_state(
    ctx: AppContext,
    session: Session,
    row: Environment,
    state: EnvState,
    *,
    message: str = "",
    reason: str = "",
) -> None:
    """Store ``state`` on the row (refusing a transition :data:`TRANSITIONS` does not allow with
    :class:`~labserver.backends.base.TransitionRefused`), commit, then publish ``env.state``."""
    check_transition(row.id, row.state, state)
    row.state = state
    row.message = message
    row.reason = reason
    row.updated_at = clock.now()
    session.add(row)
    session.commit()
    log.info("environment %s: %s %s", row.id, state, reason, extra={"env_id": row.id, "state": str(state)})
    ctx.live.publish(
        Kind.env_state,
        row.event_id,
        row.attendee_id,
        env_id=row.id,
        state=str(state),
        message=message,
        reason=reason,
        node=row.node,
        device=row.device,
    )


def get_row(session: Session, attendee: Attendee) -> Environment | None:
    return session.exec(select(Environment).where(Environment.attendee_id == attendee.id)).first()


def ref_of(row: Environment | None) -> EnvRef | None:
    return EnvRef.from_json(row.ref) if row is not None and row.ref else None


async def ensure_environment(
    ctx: AppContext, session: Session, *, event: Event, attendee: Attendee, trust_ready: bool = False
) -> EnvRef:
    """The attendee's environment, created or started if needed. With ``trust_ready`` a row stored
    ``ready`` (or ``resetting``) is believed without asking the engine; else its status is polled
    first. Raises :class:`BackendError` with a message for people when it cannot be provided."""
    ref, _fresh = await _ensure(ctx, session, event=event, attendee=attendee, trust_ready=trust_ready)
    return ref


async def start_environment(ctx: AppContext, session: Session, *, event: Event, attendee: Attendee) -> EnvRef:
    """Provision the attendee's environment now and return it once ready (states and progress are
    published as it goes). ``POST /api/v1/environment`` calls it, for scripts and the self-paced
    mode that want to wait for readiness; it holds no database connection while it waits. The
    browser never waits on it: joining starts the environment in the background
    (:func:`start_in_background`), through the admission queue."""
    return await ensure_environment(ctx, session, event=event, attendee=attendee)


async def with_environment(
    ctx: AppContext,
    session: Session,
    *,
    event: Event,
    attendee: Attendee,
    action: Callable[[EnvRef], Awaitable[T]],
) -> T:
    """``action(ref)`` on the attendee's environment, trusting a ``ready`` row. When the backend
    raises :class:`EnvironmentGone`, the engine is asked (``status``); if that made or started the
    environment again, ``action`` is retried once, else the error stands."""
    ref, _ = await _ensure(ctx, session, event=event, attendee=attendee, trust_ready=True)
    release(session)
    try:
        return await action(ref)
    except EnvironmentGone:
        ref, fresh = await _ensure(ctx, session, event=event, attendee=attendee, trust_ready=False)
        if not fresh:
            raise
    return await action(ref)


async def _ensure(
    ctx: AppContext, session: Session, *, event: Event, attendee: Attendee, trust_ready: bool
) -> tuple[EnvRef, bool]:
    """(ref, whether it was provisioned just now). The session holds no connection across the
    engine calls or the waits (lock, admission queue), and its reads and writes run in a worker
    thread: the event loop never waits for the pool (a connection holder may need the loop)."""
    spec = spec_for(ctx, event, attendee)
    logging_json.bind(event_id=spec.event_id, attendee_id=spec.attendee_id, env_id=spec.env_id)
    release(session)  # the caller's reads (token, event) end here, before any wait
    async with ctx.env_lock(spec.env_id):
        row = await in_thread(_load, session, spec.env_id)
        ref = ref_of(row)
        if row is not None and ref is not None and row.state in USABLE:
            if trust_ready:
                return ref, False
            status = await ctx.backend.status(ref)
            if status.state == EnvState.ready:
                return ref, False
            await in_thread(_died, ctx, session, row, status.message)
        row = await in_thread(_begin, ctx, session, row, spec)
        begun = clock.monotonic()
        try:
            ref = await admitted_create(ctx, spec)
        except BackendError as exc:
            log.warning("provisioning %s failed: %s (%s) %s", spec.env_id, exc.message, exc.reason, exc.log)
            await in_thread(_store, ctx, session, row, None, exc)
            metrics.env_provisioned(ctx.backend.name, clock.monotonic() - begun, failure=exc.reason or "?")
            raise
        await in_thread(_store, ctx, session, row, ref, None)
        metrics.env_provisioned(ctx.backend.name, clock.monotonic() - begun)
        return ref, True


def _load(session: Session, env_id: str) -> Environment | None:
    row = session.get(Environment, env_id)
    if row is not None:
        session.refresh(row)
    release(session)
    return row


def _died(ctx: AppContext, session: Session, row: Environment, message: str) -> None:
    session.refresh(row)
    if not transition_allowed(row.state, EnvState.provisioning):  # died during a lab reset
        set_state(ctx, session, row, EnvState.stopped, message=message)
    release(session)


def _begin(ctx: AppContext, session: Session, row: Environment | None, spec: EnvSpec) -> Environment:
    if row is None:
        row = Environment(
            id=spec.env_id, event_id=spec.event_id, attendee_id=spec.attendee_id, backend=ctx.backend.name
        )
        session.add(row)
        session.commit()
    set_state(ctx, session, row, EnvState.provisioning, message="Preparing your environment")
    return row


def _store(
    ctx: AppContext, session: Session, row: Environment, ref: EnvRef | None, exc: BackendError | None
) -> None:
    if exc is not None or ref is None:
        message, reason = (exc.message, exc.reason) if exc is not None else ("", "")
        set_state(ctx, session, row, EnvState.failed, message=message, reason=reason)
        return
    session.refresh(row)
    row.ref = ref.to_json()
    row.node = ref.node
    row.device = ref.device
    set_state(ctx, session, row, EnvState.ready)


async def admitted_create(ctx: AppContext, spec: EnvSpec) -> EnvRef:
    """``backend.create(spec)`` once admitted (services/provisioning/admission.py): queued starts are told their
    place (``env.queue``); a backend with no room now (``capacity``/``no-room``) keeps the start
    queued at the head and retries when room frees or after ``admission.retry_s``. Holds no session."""

    def say(phase: str, message: str, **extra: object) -> None:
        ctx.live.publish(
            Kind.env_progress if phase != "queued" else Kind.env_queue,
            spec.event_id,
            spec.attendee_id,
            env_id=spec.env_id,
            phase=phase,
            message=message,
            **extra,
        )

    async def progress(phase: str, message: str) -> None:
        say(phase, message)

    last: list[int] = []

    def on_place(ahead: int) -> None:
        if last and (last[-1] == ahead or (ahead >= 10 and ahead % 5)):
            return  # a long queue is told every 5 places (the instructor's stream sees them all)
        last.append(ahead)
        say("queued", f"Starting your environment: {ahead} ahead of you", ahead=ahead)

    queued_at = clock.monotonic()
    async with ctx.admission.slot(spec.env_id, on_place):
        metrics.ENV_START.labels("queue").observe(clock.monotonic() - queued_at)
        while True:
            started = clock.monotonic()
            try:
                ref = await ctx.backend.create(spec, progress)
            except BackendError as exc:
                if exc.reason not in CAPACITY_REASONS:
                    raise
                say("queued", "The lab machines are full: your environment starts when room frees", ahead=0)
                await ctx.admission.wait_for_room(ctx.settings.admission.retry_s)
                continue
            metrics.ENV_START.labels("create").observe(clock.monotonic() - started)
            return ref


def start_in_background(ctx: AppContext, *, event: Event, attendee: Attendee) -> asyncio.Task[None]:
    """Begin provisioning the attendee's environment now (at join) without waiting for it; failures
    are stored on the row and published (``env.state``), never raised to anyone."""

    async def run() -> None:
        with Session(ctx.engine, expire_on_commit=False) as session:
            try:
                await start_environment(ctx, session, event=event, attendee=attendee)
            except BackendError:
                pass  # stored as failed and published by _ensure
            except Exception:  # noqa: BLE001 (a background task has nobody to raise to)
                log.exception("starting the environment of attendee %s failed", attendee.id)

    task = asyncio.ensure_future(run())
    ctx.background.add(task)
    task.add_done_callback(ctx.background.discard)
    return task


async def reset_lab(
    ctx: AppContext, session: Session, *, event: Event, attendee: Attendee, lab_id: str
) -> str:
    """Put the lab folder back to its starter; the old files go to a dated backup folder. Returns the
    backup's workspace-relative path."""
    lab = ctx.catalog.labs[lab_id]
    ref = await ensure_environment(ctx, session, event=event, attendee=attendee)
    row = get_row(session, attendee)
    assert row is not None
    release(session)
    terminal_key = (ref.env_id, lab_id)
    await ctx.terminals.close(terminal_key)
    session.refresh(row)
    set_state(ctx, session, row, EnvState.resetting, message=f"Resetting {lab_id}")
    try:
        backup = await ctx.backend.reset_lab(
            # to the microsecond: two resets in one second must not pick one (non-empty) folder
            ref,
            LabSeed(lab.id, lab.starter),
            clock.now().strftime("%Y%m%d-%H%M%S-%f"),
        )
    finally:
        session.refresh(row)
        if row.state == EnvState.resetting:  # not if a restart or the culler moved it on meanwhile
            set_state(ctx, session, row, EnvState.ready)
    ctx.live.publish(Kind.lab_reset, event.id or 0, attendee.id, lab=lab_id, backup=backup)
    return backup


async def reconcile(ctx: AppContext, session: Session) -> list[EnvRef]:
    """After a restart: poll what the database says exists, and return labelled environments that have
    no row (orphans, reported, never deleted here)."""
    rows = session.exec(select(Environment).where(Environment.backend == ctx.backend.name)).all()
    release(session)
    known = set()
    for row in rows:
        known.add(row.id)
        ref = ref_of(row)
        if ref is None:
            if row.state in (EnvState.provisioning, EnvState.pending):
                set_state(
                    ctx, session, row, EnvState.stopped, message="The server restarted while preparing."
                )
            continue
        status = await ctx.backend.status(ref)
        if status.state == row.state:
            continue
        session.refresh(row)
        if not transition_allowed(row.state, status.state):
            # e.g. stored stopped, found running: the server takes it into service again
            if not transition_allowed(row.state, EnvState.provisioning):
                log.error("environment %s: cannot go from %s to %s", row.id, row.state, status.state)
                continue
            set_state(ctx, session, row, EnvState.provisioning, message="Found after a restart")
        set_state(ctx, session, row, status.state, message=status.message)
    release(session)
    found = await ctx.backend.discover()
    orphans = [ref for ref in found if ref.env_id not in known]
    for ref in orphans:
        log.warning("orphan environment %s (%s) has no database row", ref.env_id, ref.infra_id)
    return orphans
