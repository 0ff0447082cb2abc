"""Help with consent: who may type in an attendee's terminal besides the attendee (the book of
shares; what a share does and who changes it: :mod:`labserver.services.support.help_share`).

Threat model. The instructor token opens a *read-only* view of any attendee's shell; typing into
it is a take-over of someone's machine and needs that person's consent, given on their own page
with their own token. So the writable view is granted by a :class:`Share` only, and a share:

- is asked by an instructor for one raised hand (its attendee, its lab's shell) and is ``asked``
  until the attendee accepts it: an asked share grants nothing;
- is ``active`` only after the attendee accepted it, and only for that attendee's environment
  and that lab's shell (:meth:`ShareBook.grant`);
- ends for good (``ended``) when either side ends it, when the attendee declines it, when the
  hand is resolved or cancelled, or when another share replaces it; an ended share is never
  active again (a new one must be asked and accepted). Ending sets :attr:`Share.ended`, which
  the writable view watches: the socket is closed the moment the share ends, and each frame is
  checked again before it is written (:meth:`Share.may_type`).

The book is in memory: a restart ends every share (the shells end with the server too)."""

from __future__ import annotations

import asyncio
import enum
import itertools
from dataclasses import dataclass, field


class ShareState(enum.StrEnum):
    asked = "asked"  # the instructor asked; the attendee has not answered
    active = "active"  # the attendee accepted: the instructor may type
    ended = "ended"  # declined, ended by either side, or the hand was closed


@dataclass
class Share:
    id: int
    event_id: int
    attendee_id: int
    env_id: str
    lab: str
    help_id: int
    by: str  # the instructor who asked
    state: ShareState = ShareState.asked
    ended_by: str = ""
    #: set when the share ends; the writable view closes on it
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    last_typing: float = -1e9  # loop time of the last ``share.typing`` published
    loop: asyncio.AbstractEventLoop | None = None  # the loop whose sockets wait on ``ended``

    def may_type(self) -> bool:
        return self.state == ShareState.active


class ShareBook:
    """Every share of this server, by id and by attendee (at most one live share per attendee)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.by_id: dict[int, Share] = {}
        self._live: dict[int, Share] = {}  # attendee id -> asked or active share

    def new(
        self,
        *,
        event_id: int,
        attendee_id: int,
        env_id: str,
        lab: str,
        help_id: int,
        by: str,
        loop: asyncio.AbstractEventLoop | None,
    ) -> Share:
        """A new asked share, the attendee's live one (``loop``: the server's, where sockets wait)."""
        share = Share(next(self._ids), event_id, attendee_id, env_id, lab, help_id, by, loop=loop)
        self.by_id[share.id] = share
        self._live[attendee_id] = share
        return share

    def live_of(self, attendee_id: int) -> Share | None:
        """The attendee's asked or active share, or None."""
        share = self._live.get(attendee_id)
        return share if share is not None and share.state != ShareState.ended else None

    def live_in(self, event_id: int) -> list[Share]:
        return [
            s for s in list(self._live.values()) if s.event_id == event_id and s.state != ShareState.ended
        ]

    def get(self, share_id: int) -> Share | None:
        return self.by_id.get(share_id)

    def grant(self, env_id: str, lab: str) -> Share | None:
        """The active share that lets someone besides the attendee type in ``(env_id, lab)``."""
        for share in self._live.values():
            if share.env_id == env_id and share.lab == lab and share.may_type():
                return share
        return None

    def activate(self, share: Share) -> bool:
        if share.state != ShareState.asked or self._live.get(share.attendee_id) is not share:
            return False
        share.state = ShareState.active
        return True

    def end(self, share: Share, by: str) -> bool:
        """End ``share`` for good; False when it had ended already."""
        if share.state == ShareState.ended:
            return False
        share.state = ShareState.ended  # may_type() is False from here on, in any thread
        share.ended_by = by
        if share.loop is not None and not share.loop.is_closed():
            share.loop.call_soon_threadsafe(share.ended.set)  # ended from a sync route's thread too
        else:
            share.ended.set()
        if self._live.get(share.attendee_id) is share:
            del self._live[share.attendee_id]
        return True
