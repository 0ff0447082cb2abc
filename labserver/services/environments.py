"""One environment per attendee per event: provisioning, state changes (stored, then published),
reset of a lab folder, and reconciliation after a server restart."""

from __future__ import annotations

import logging

from sqlmodel import Session, select

from labserver import clock
from labserver.backends.base import (
    BackendError,
    EnvRef,
    EnvSpec,
    EnvState,
    LabSeed,
)
from labserver.models import Attendee, Environment, Event
from labserver.services.context import AppContext

log = logging.getLogger(__name__)


def env_id_for(event_id: int, attendee_id: int) -> str:
    return f"ev{event_id}-at{attendee_id}"


def event_labs(ctx: AppContext, event: Event) -> list[str]:
    """The labs of an event that exist in the catalog, in the event's order (all labs if none set)."""
    if event.labs:
        return [lab_id for lab_id in event.labs if lab_id in ctx.catalog.labs]
    return list(ctx.catalog.labs)


def spec_for(ctx: AppContext, event: Event, attendee: Attendee) -> EnvSpec:
    assert event.id is not None and attendee.id is not None
    labs = [ctx.catalog.labs[lab_id] for lab_id in event_labs(ctx, event)]
    seeds = tuple(LabSeed(lab.id, lab.starter) for lab in labs)
    cpus = max([lab.spec.requires.cpus for lab in labs] or [1.0])
    memory = max([lab.spec.requires.memory_mb for lab in labs] or [2048])
    network = any(lab.spec.requires.network for lab in labs)
    device = "npu" if any(lab.spec.requires.device == "npu" for lab in labs) else "any"
    return EnvSpec(
        env_id=env_id_for(event.id, attendee.id),
        event_id=event.id,
        attendee_id=attendee.id,
        labs=seeds,
        image=event.image or ctx.settings.docker.image,
        device=device,
        cpus=cpus,
        memory_mb=memory,
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
    row.state = state
    row.message = message
    row.reason = reason
    row.updated_at = clock.now()
    session.add(row)
    session.commit()
    ctx.live.publish(
        "env.state",
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
    ctx: AppContext, session: Session, *, event: Event, attendee: Attendee
) -> EnvRef:
    """The attendee's environment, created if needed. Raises :class:`BackendError` with a message for
    people when it cannot be provided."""
    spec = spec_for(ctx, event, attendee)
    async with ctx.env_lock(spec.env_id):
        row = session.get(Environment, spec.env_id)
        if row is not None:
            session.refresh(row)
        ref = ref_of(row)
        if row is not None and ref is not None and row.state == EnvState.ready:
            status = await ctx.backend.status(ref)
            if status.state == EnvState.ready:
                return ref
        if row is None:
            row = Environment(
                id=spec.env_id, event_id=spec.event_id, attendee_id=spec.attendee_id, backend=ctx.backend.name
            )
            session.add(row)
            session.commit()
        set_state(ctx, session, row, EnvState.provisioning, message="Preparing your environment")

        async def progress(phase: str, message: str) -> None:
            ctx.live.publish(
                "env.progress",
                spec.event_id,
                spec.attendee_id,
                env_id=spec.env_id,
                phase=phase,
                message=message,
            )

        try:
            ref = await ctx.backend.create(spec, progress)
        except BackendError as exc:
            log.warning("provisioning %s failed: %s (%s) %s", spec.env_id, exc.message, exc.reason, exc.log)
            set_state(ctx, session, row, EnvState.failed, message=exc.message, reason=exc.reason)
            raise
        row.ref = ref.to_json()
        row.node = ref.node
        row.device = ref.device
        set_state(ctx, session, row, EnvState.ready)
        return ref


async def reset_lab(
    ctx: AppContext, session: Session, *, event: Event, attendee: Attendee, lab_id: str
) -> str:
    """Put the lab folder back to its starter; the old files go to a dated backup folder. Returns the
    backup's workspace-relative path."""
    lab = ctx.catalog.labs[lab_id]
    ref = await ensure_environment(ctx, session, event=event, attendee=attendee)
    row = get_row(session, attendee)
    assert row is not None
    terminal_key = (ref.env_id, lab_id)
    await ctx.terminals.close(terminal_key)
    set_state(ctx, session, row, EnvState.resetting, message=f"Resetting {lab_id}")
    try:
        backup = await ctx.backend.reset_lab(
            ref, LabSeed(lab.id, lab.starter), clock.now().strftime("%Y%m%d-%H%M%S")
        )
    finally:
        set_state(ctx, session, row, EnvState.ready)
    ctx.live.publish("lab.reset", event.id or 0, attendee.id, lab=lab_id, backup=backup)
    return backup


async def reconcile(ctx: AppContext, session: Session) -> list[EnvRef]:
    """After a restart: poll what the database says exists, and return labelled environments that have
    no row (orphans, reported, never deleted here)."""
    rows = session.exec(select(Environment).where(Environment.backend == ctx.backend.name)).all()
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
        if status.state != row.state:
            set_state(ctx, session, row, status.state, message=status.message)
    found = await ctx.backend.discover()
    orphans = [ref for ref in found if ref.env_id not in known]
    for ref in orphans:
        log.warning("orphan environment %s (%s) has no database row", ref.env_id, ref.infra_id)
    return orphans
