"""Who joined, and from where: the instructor's view of suspicious joins, and removing an attendee
(issue 13 item 6, starvation by cheap identities).

At join the server notes (:mod:`labserver.services.joining.join_notes`), in memory only, the browser's user agent and an **address key**: an HMAC
of the client address under the server's secret key, cut to 12 hex digits. The key tells joins from
the same address apart without storing or showing the address. A restart forgets both (the list
then says "unknown"). :func:`joins` lists every attendee of an event with the join time, that user
agent, how many attendees of the event joined from the same address, and the reasons a join looks
suspicious:

- ``same-address``: at least ``SAME_ADDRESS`` attendees joined from one address (a room behind one
  NAT also does this, so it is a hint, not a verdict);
- ``scripted``: the user agent is empty or a known HTTP library or tool (curl, python-httpx, ...);
- ``idle``: the attendee never opened a step but has run checks.

:func:`remove` takes an attendee out of the event for good. Their shells are closed, their
environment is destroyed (workspace and terminal recordings included), their rows are deleted (check runs and their file
digests, hint opens, step starts, help requests, environment, attendee) and their token stops working. The engine call happens
before the database changes, and no session is held across it.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlmodel import Session, col, select

from labserver.models import (
    Attendee,
    CheckFiles,
    CheckRun,
    Environment,
    Event,
    HelpRequest,
    HintOpen,
    StepStart,
)
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import env_id_for, ref_of
from labserver.services.support import recordings

SAME_ADDRESS = 3
SCRIPTED = (
    "curl",
    "wget",
    "python",
    "httpx",
    "aiohttp",
    "go-http-client",
    "okhttp",
    "java/",
    "libwww",
    "node-fetch",
)


def scripted(user_agent: str) -> bool:
    ua = user_agent.strip().lower()
    return not ua or any(tool in ua for tool in SCRIPTED)


def joins(ctx: AppContext, session: Session, event: Event) -> list[dict[str, object]]:
    """Every attendee of ``event``, oldest join first, with the facts and reasons above."""
    attendees = session.exec(
        select(Attendee).where(Attendee.event_id == event.id).order_by(col(Attendee.id))
    ).all()
    ids = [a.id for a in attendees]
    checks: dict[int, int] = {}
    for (aid,) in session.execute(
        select(CheckRun.attendee_id).where(col(CheckRun.attendee_id).in_(ids))
    ).all():
        checks[aid] = checks.get(aid, 0) + 1
    opened = set(session.exec(select(StepStart.attendee_id).where(col(StepStart.attendee_id).in_(ids))).all())
    watch = ctx.join_watch
    per_key: dict[str, int] = {}
    for a in attendees:
        note = watch.notes.get(a.id or 0)
        if note and note.address_key:
            per_key[note.address_key] = per_key.get(note.address_key, 0) + 1
    out: list[dict[str, object]] = []
    for a in attendees:
        assert a.id is not None
        note = watch.notes.get(a.id)
        same = per_key.get(note.address_key, 0) if note and note.address_key else 0
        reasons = []
        if same >= SAME_ADDRESS:
            reasons.append("same-address")
        if note is not None and scripted(note.user_agent):
            reasons.append("scripted")
        if checks.get(a.id, 0) and a.id not in opened:
            reasons.append("idle")
        out.append(
            {
                "id": a.id,
                "name": a.name,
                "joined_at": a.created_at.isoformat(),
                "user_agent": note.user_agent if note else None,
                "same_address": same if note else None,
                "checks": checks.get(a.id, 0),
                "reasons": reasons,
            }
        )
    return out


async def remove(ctx: AppContext, session: Session, *, event: Event, attendee: Attendee) -> None:
    """Take ``attendee`` out of ``event`` for good (module docstring)."""
    assert attendee.id is not None
    row = session.exec(select(Environment).where(Environment.attendee_id == attendee.id)).first()
    ref = ref_of(row)
    env_id = row.id if row is not None else None
    session.commit()  # end the read transaction: nothing is held across the engine
    if env_id is not None:
        await ctx.terminals.close_env(env_id)
    if ref is not None:
        await ctx.backend.destroy(ref)
    runs = select(CheckRun.id).where(col(CheckRun.attendee_id) == attendee.id)
    session.execute(delete(CheckFiles).where(col(CheckFiles.run_id).in_(runs)))
    await recordings.delete_for_environment(ctx, env_id or env_id_for(event.id or 0, attendee.id))
    for table, column in (
        (HintOpen, HintOpen.attendee_id),
        (CheckRun, CheckRun.attendee_id),
        (StepStart, StepStart.attendee_id),
        (HelpRequest, HelpRequest.attendee_id),
        (Environment, Environment.attendee_id),
    ):
        session.execute(delete(table).where(col(column) == attendee.id))
    session.execute(delete(Attendee).where(col(Attendee.id) == attendee.id))
    session.commit()
    ctx.join_watch.forget(attendee.id)
    ctx.check_locks.pop(attendee.id, None)
