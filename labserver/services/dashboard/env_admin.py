"""What an instructor does to one attendee's environment: restart, recreate, reveal a step's solution.
(Reset of a lab folder is :func:`labserver.services.provisioning.environments.reset_lab`.)

- **restart** closes the attendee's shells, stops the environment where the backend can
  (:class:`~labserver.backends.base.Stoppable`: Docker stops the container, so every process the
  attendee left running is gone; the local backend's shells are their own sandboxes, gone with
  them) and provisions it again from its existing state (``Backend.create`` is idempotent: the
  workspace is kept). Tests: tests/routes/test_restart_env.py, tests/backends/docker/test_restart_env.py;
- **recreate** destroys the environment (workspace and terminal recordings included) and
  provisions a fresh one from the starters;
- **reveal** copies the solution files of one step into ``<lab>/.solution/`` of the attendee's
  workspace. A lab has one ``solution/`` folder, so a step's files are those whose path (or file
  name) appears in that step's checker or instructions; when none does, the whole folder is copied.
- **stop all** (:func:`stop_all`) stops every environment of an event (workspaces kept); each
  attendee's next action starts theirs again.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from sqlmodel import Session, select

from labserver.backends.base import BackendError, EnvRef, EnvState, Stoppable, transition_allowed
from labserver.content import Lab, Step
from labserver.db import release
from labserver.live import Kind
from labserver.models import Attendee, Environment, Event
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import ensure_environment, get_row, ref_of, set_state
from labserver.services.support import recordings

REVEAL_DIR = ".solution"
log = logging.getLogger(__name__)


async def restart(ctx: AppContext, session: Session, *, event: Event, attendee: Attendee) -> EnvRef:
    row = get_row(session, attendee)
    release(session)
    if row is not None:
        await ctx.terminals.close_env(row.id)
        ref = ref_of(row)
        if ref is not None and isinstance(ctx.backend, Stoppable):
            await ctx.backend.stop(ref)  # every process in it ends, not only the shells
        session.refresh(row)
        set_state(ctx, session, row, EnvState.stopped, message="Restarting")
    return await ensure_environment(ctx, session, event=event, attendee=attendee)


async def recreate(ctx: AppContext, session: Session, *, event: Event, attendee: Attendee) -> EnvRef:
    row = get_row(session, attendee)
    release(session)
    if row is not None:
        await ctx.terminals.close_env(row.id)
        session.refresh(row)
        ref = ref_of(row)
        set_state(ctx, session, row, EnvState.stopped, message="Recreating")  # commits: released
        if ref is not None:
            await ctx.backend.destroy(ref)
            ctx.admission.room_freed()
        await recordings.delete_for_environment(ctx, row.id)  # they go with the workspace
        session.refresh(row)
        row.ref = ""
        session.add(row)
        session.commit()
    return await ensure_environment(ctx, session, event=event, attendee=attendee)


def solution_files(lab: Lab, step: Step) -> list[Path]:
    """Solution files of ``step`` (paths relative to the lab's ``solution/``)."""
    root = lab.solution
    if not root.is_dir():
        return []
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    texts = [step.checker.read_text(errors="replace")] if step.checker.is_file() else []
    texts += [step.instructions(lang) for lang in ("en",)]
    blob = "\n".join(texts)
    mine = [f for f in files if str(f) in blob or (f.name in blob and len(f.name) > 3)]
    return mine or files


async def reveal(
    ctx: AppContext, session: Session, *, event: Event, attendee: Attendee, lab: Lab, step: Step, by: str
) -> list[str]:
    """Copy the step's solution files into ``<lab>/.solution/``; returns the workspace paths written,
    and publishes ``solution.revealed`` to the attendee."""
    ref = await ensure_environment(ctx, session, event=event, attendee=attendee)
    written = []
    for rel in solution_files(lab, step):
        target = f"{lab.id}/{REVEAL_DIR}/{rel.as_posix()}"
        await ctx.backend.write_file(ref, target, (lab.solution / rel).read_bytes())
        written.append(target)
    ctx.live.publish(
        Kind.solution_revealed, event.id or 0, attendee.id, lab=lab.id, step=step.id, files=written, by=by
    )
    return written


#: what an attendee sees on an environment the instructor stopped
STOPPED_MESSAGE = "The instructor stopped the environments; yours starts again when you continue."
STOP_AT_ONCE = 8  # stop calls in flight at once (each is one engine call)


class NotStoppable(Exception):
    """The backend cannot stop environments (only destroy them)."""


async def stop_all(ctx: AppContext, *, event_id: int) -> tuple[list[str], dict[str, str]]:
    """Stop every environment of the event that runs or is starting (any
    :class:`~labserver.backends.base.Stoppable` backend): close its shells, stop it (workspace
    kept), store and publish ``stopped`` (reason ``instructor``). The attendee's next action
    starts it again (``ensure_environment``). Returns (stopped ids, {id: why} for failures).

    No database connection is held while the backend works: rows are read in one short session,
    and each state is written in its own after that environment's stop returned."""
    backend = ctx.backend
    if not isinstance(backend, Stoppable):
        raise NotStoppable(f"The {backend.name} backend cannot stop environments.")
    with Session(ctx.engine, expire_on_commit=False) as session:
        rows = session.exec(select(Environment).where(Environment.event_id == event_id)).all()
        targets = [
            (row.id, EnvRef.from_json(row.ref))
            for row in rows
            if row.ref and row.state != EnvState.stopped and transition_allowed(row.state, EnvState.stopped)
        ]
    slots = asyncio.Semaphore(STOP_AT_ONCE)
    stopped: list[str] = []
    failed: dict[str, str] = {}

    async def stop_one(env_id: str, ref: EnvRef) -> None:
        async with slots:
            try:
                await ctx.terminals.close_env(env_id)
                await backend.stop(ref)
            except BackendError as exc:
                failed[env_id] = exc.message
                return
            except Exception as exc:  # noqa: BLE001 - one engine error must not leave the rest running
                log.warning("stop all: %s could not be stopped: %r", env_id, exc)
                failed[env_id] = "The lab machine did not stop it; try again."
                return
        with Session(ctx.engine, expire_on_commit=False) as session:
            row = session.get(Environment, env_id)
            if row is not None and transition_allowed(row.state, EnvState.stopped):
                set_state(ctx, session, row, EnvState.stopped, message=STOPPED_MESSAGE, reason="instructor")
        stopped.append(env_id)
        ctx.admission.room_freed()  # a stopped environment promises no CPU or memory any more

    await asyncio.gather(*(stop_one(env_id, ref) for env_id, ref in targets))
    return sorted(stopped), failed
