"""Help with consent: from a raised hand, an instructor asks to type in the attendee's terminal;
the attendee accepts on their own page; then both type in the same shell, the attendee's page
says who else is typing, and either side ends it. The rules of who may type, and why nothing
else grants it, are in :mod:`labserver.terminals.sharing` (its threat model); this module changes shares
and tells both sides:

==================  ==========================================  ===================================
what                who may                                     published (to the attendee's id)
==================  ==========================================  ===================================
:func:`ask`         an instructor, for an open or claimed hand   ``share.asked``
:func:`accept`      the attendee the share was asked of          ``share.started``
:func:`end`         either side; declining is ending             ``share.ended``
:func:`typed`       the writable view, at most once a second     ``share.typing``
==================  ==========================================  ===================================

Resolving or cancelling the hand ends its share (:mod:`labserver.services.support.help` calls
:func:`end_for_attendee`). The start and the end are marked in the terminal's recording."""

from __future__ import annotations

import asyncio

from sqlmodel import Session

from labserver.live import Kind
from labserver.models import HelpRequest, HelpState
from labserver.services.context import AppContext
from labserver.services.provisioning.environments import env_id_for
from labserver.services.support import recordings
from labserver.terminals.sharing import Share, ShareState

TYPING_EVERY_S = 1.0


class ShareError(Exception):
    """A share that cannot be asked or accepted; the message says what to do."""


def ask(ctx: AppContext, session: Session, *, event_id: int, help_id: int, by: str) -> Share:
    """Ask the attendee of raised hand ``help_id`` to share their terminal in the hand's lab.
    Asking again while a share of that hand is asked or active returns it; any other live share
    of the attendee ends (replaced). Raises ``LookupError`` (no such hand in the event) or
    :class:`ShareError`."""
    h = session.get(HelpRequest, help_id)
    if h is None or h.event_id != event_id:
        raise LookupError(help_id)
    if h.state not in (HelpState.open, HelpState.claimed):
        raise ShareError("This raised hand is closed: sharing can be asked only for an open one.")
    if not h.lab_id:
        raise ShareError("This raised hand names no lab: ask the attendee to raise it from the lab's page.")
    old = ctx.shares.live_of(h.attendee_id)
    if old is not None and old.help_id == h.id:
        return old
    if old is not None:
        end(ctx, old, by=by)
    share = ctx.shares.new(
        event_id=event_id,
        attendee_id=h.attendee_id,
        env_id=env_id_for(event_id, h.attendee_id),
        lab=h.lab_id,
        help_id=h.id or 0,
        by=by,
        loop=ctx.loop,
    )
    ctx.live.publish(
        Kind.share_asked,
        event_id,
        h.attendee_id,
        share_id=share.id,
        help_id=share.help_id,
        lab=share.lab,
        by=by,
    )
    return share


def of_attendee(ctx: AppContext, *, attendee_id: int, share_id: int) -> Share:
    """Share ``share_id`` when it was asked of this attendee (else ``LookupError``)."""
    share = ctx.shares.get(share_id)
    if share is None or share.attendee_id != attendee_id:
        raise LookupError(share_id)
    return share


def of_event(ctx: AppContext, *, event_id: int, share_id: int) -> Share:
    share = ctx.shares.get(share_id)
    if share is None or share.event_id != event_id:
        raise LookupError(share_id)
    return share


def accept(ctx: AppContext, *, attendee_id: int, share_id: int) -> Share:
    """The attendee says yes: the share becomes active (the instructor may type)."""
    share = of_attendee(ctx, attendee_id=attendee_id, share_id=share_id)
    if share.state == ShareState.active:
        return share
    if not ctx.shares.activate(share):
        raise ShareError("This request to share has ended; the instructor can ask again.")
    ctx.live.publish(
        Kind.share_started, share.event_id, attendee_id, share_id=share.id, lab=share.lab, by=share.by
    )
    recordings.mark(
        ctx, event_id=share.event_id, attendee_id=attendee_id, lab=share.lab, label=f"shared with {share.by}"
    )
    return share


def end(ctx: AppContext, share: Share, *, by: str) -> bool:
    """End ``share`` for good (declined, stopped by either side, or its hand closed); the writable
    view closes at once. False when it had ended already."""
    was_active = share.state == ShareState.active
    if not ctx.shares.end(share, by):
        return False
    ctx.live.publish(Kind.share_ended, share.event_id, share.attendee_id, share_id=share.id, by=by)
    if was_active:
        recordings.mark(
            ctx,
            event_id=share.event_id,
            attendee_id=share.attendee_id,
            lab=share.lab,
            label=f"sharing ended by {by}",
        )
    return True


def end_for_attendee(ctx: AppContext, *, attendee_id: int, by: str) -> None:
    share = ctx.shares.live_of(attendee_id)
    if share is not None:
        end(ctx, share, by=by)


def typed(ctx: AppContext, share: Share, *, who: str) -> None:
    """Someone besides the attendee typed: tell the attendee's page (at most once a second)."""
    now = asyncio.get_running_loop().time()
    if now - share.last_typing < TYPING_EVERY_S:
        return
    share.last_typing = now
    ctx.live.publish(Kind.share_typing, share.event_id, share.attendee_id, share_id=share.id, by=who)
