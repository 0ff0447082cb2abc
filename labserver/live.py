"""In-process publish/subscribe feeding the Server-Sent Event streams.

One small event model for everyone: ``LiveEvent(kind, event_id, attendee_id, data)``. The attendee
page and the instructor grid consume the same format. A subscriber gets events of one event,
optionally only those for one attendee plus the event-wide ones (``attendee_id is None``).

Delivery is best effort and in order per subscriber; a subscriber that falls more than ``maxsize``
events behind gets a single ``resync`` event (its page reloads state from the JSON API) instead of
blocking publishers. ``publish`` is called only after the change it describes is committed.

Every kind is a member of :class:`Kind`; ``publish`` refuses any other name. The payload of each
kind is documented in ``docs/architecture.md`` ("Live event kinds"; a test fails when one is
missing there), and the attendee page's ``web/static/js/live.js`` subscribes to these names only."""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any


class Kind(enum.StrEnum):
    """The kinds of live event (payloads: docs/architecture.md, "Live event kinds")."""

    check_started = "check.started"
    check_finished = "check.finished"
    check_queued = "check.queued"
    env_state = "env.state"
    env_progress = "env.progress"
    env_queue = "env.queue"
    step_opened = "step.opened"
    lab_reset = "lab.reset"
    solution_revealed = "solution.revealed"
    help_raised = "help.raised"
    help_claimed = "help.claimed"
    help_resolved = "help.resolved"
    help_cancelled = "help.cancelled"
    share_asked = "share.asked"
    share_started = "share.started"
    share_ended = "share.ended"
    share_typing = "share.typing"
    announcement = "announcement"
    pace = "pace"
    event_status = "event.status"
    resync = "resync"  # sent by the hub itself to a subscriber that fell behind


@dataclass(frozen=True)
class LiveEvent:
    kind: Kind
    event_id: int
    attendee_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0

    def sse(self) -> dict[str, str]:
        kind = str(self.kind)
        payload = {"kind": kind, "attendee_id": self.attendee_id, **self.data}
        return {"event": kind, "id": str(self.seq), "data": json.dumps(payload, default=str)}


class Subscription:
    def __init__(self, hub: LiveHub, event_id: int, attendee_id: int | None, maxsize: int) -> None:
        self.hub = hub
        self.event_id = event_id
        self.attendee_id = attendee_id  # None = everything in the event (instructor)
        self.queue: asyncio.Queue[LiveEvent] = asyncio.Queue(maxsize)
        self.overflowed = False
        try:  # the loop that reads (None: a subscriber outside any loop, read by polling)
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._thread = threading.get_ident()

    def deliver(self, ev: LiveEvent) -> None:
        """:meth:`offer` from any thread: a publisher in a worker thread (a sync route, a database
        step run off the loop) hands the event to the subscriber's loop, which wakes to read it."""
        if self._loop is None or threading.get_ident() == self._thread:
            self.offer(ev)
            return
        try:
            self._loop.call_soon_threadsafe(self.offer, ev)
        except RuntimeError:  # that loop is closed: nobody reads it any more
            self.offer(ev)

    def wants(self, ev: LiveEvent) -> bool:
        if ev.event_id != self.event_id:
            return False
        return self.attendee_id is None or ev.attendee_id in (None, self.attendee_id)

    def offer(self, ev: LiveEvent) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(ev)
        except asyncio.QueueFull:
            self.overflowed = True
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(LiveEvent(Kind.resync, self.event_id, self.attendee_id, {}, ev.seq))

    async def get(self) -> LiveEvent:
        ev = await self.queue.get()
        if ev.kind == Kind.resync:
            self.overflowed = False
        return ev

    def close(self) -> None:
        self.hub._subs.discard(self)


class LiveHub:
    def __init__(self, maxsize: int = 1000) -> None:
        self._subs: set[Subscription] = set()
        self._seq = itertools.count(1)
        self.maxsize = maxsize

    def subscribe(self, event_id: int, attendee_id: int | None = None) -> Subscription:
        sub = Subscription(self, event_id, attendee_id, self.maxsize)
        self._subs.add(sub)
        return sub

    def publish(self, kind: Kind, event_id: int, attendee_id: int | None = None, **data: Any) -> LiveEvent:
        """Deliver one event to every subscriber that wants it; call only after the commit of the
        change it describes. ``kind`` must be a :class:`Kind` (a plain string is accepted only when
        it names one; anything else raises ``ValueError``)."""
        ev = LiveEvent(Kind(kind), event_id, attendee_id, data, next(self._seq))
        for sub in list(self._subs):
            if sub.wants(ev):
                sub.deliver(ev)
        return ev

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    async def stream(
        self,
        sub: Subscription,
        *,
        keepalive_s: float = 15.0,
        ready: dict[str, Any] | None = None,
        render: Callable[[LiveEvent], dict[str, str] | None] | None = None,
    ) -> AsyncIterator[dict[str, str]]:
        """SSE dicts for ``sub``: first a ``ready`` event (the subscription is live; ``ready`` adds to
        its payload), then events, with a comment keepalive when idle. ``render`` turns an event into
        an SSE dict, or None to send nothing (default: :meth:`LiveEvent.sse`). Unsubscribes when the
        client goes away."""
        try:
            yield {"event": "ready", "data": json.dumps({"kind": "ready", **(ready or {})})}
            while True:
                try:
                    ev = await asyncio.wait_for(sub.get(), keepalive_s)
                except TimeoutError:
                    yield {"comment": "keepalive"}
                    continue
                out = render(ev) if render else ev.sse()
                if out is not None:
                    yield out
        finally:
            sub.close()
