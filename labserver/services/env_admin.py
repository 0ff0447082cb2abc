"""What an instructor does to one attendee's environment: restart, recreate, reveal a step's solution.
(Reset of a lab folder is :func:`labserver.services.environments.reset_lab`.)

- **restart** closes the attendee's shells and provisions the environment again from its existing
  state (``Backend.create`` is idempotent: the workspace is kept);
- **recreate** destroys the environment (workspace included) and provisions a fresh one from the
  starters;
- **reveal** copies the solution files of one step into ``<lab>/.solution/`` of the attendee's
  workspace. A lab has one ``solution/`` folder, so a step's files are those whose path (or file
  name) appears in that step's checker or instructions; when none does, the whole folder is copied.
"""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session

from labserver.backends.base import EnvRef, EnvState
from labserver.content import Lab, Step
from labserver.db import release
from labserver.live import Kind
from labserver.models import Attendee, Event
from labserver.services.context import AppContext
from labserver.services.environments import ensure_environment, get_row, ref_of, set_state

REVEAL_DIR = ".solution"


async def restart(ctx: AppContext, session: Session, *, event: Event, attendee: Attendee) -> EnvRef:
    row = get_row(session, attendee)
    release(session)
    if row is not None:
        await ctx.terminals.close_env(row.id)
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
