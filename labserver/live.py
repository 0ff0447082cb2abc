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
import collections
import enum
import inspect
import itertools
import json
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


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
    lab_changed = "lab.changed"  # serve --dev: a lab's files changed (reloaded and linted)
    resync = "resync"  # sent by the hub itself to a subscriber that fell behind


@dataclass(frozen=True)
class LiveEvent:
    kind: Kind
    event_id: int
    attendee_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    seq: int = 0

    def sse(self) -> dict[str, str]:
        """The SSE dict every attendee stream sends for this event, encoded once however many
        streams send it (an event-wide event reaches the whole room); the dict is shared, never
        change it."""
        out: dict[str, str] | None = self.__dict__.get("_sse")
        if out is None:
            kind = str(self.kind)
            payload = {"kind": kind, "attendee_id": self.attendee_id, **self.data}
            out = {"event": kind, "id": str(self.seq), "data": json.dumps(payload, default=str)}
            object.__setattr__(self, "_sse", out)  # frozen: a cache, not a field
        return out

    @property
    def encoded(self) -> bool:
        return "_sse" in self.__dict__


class Subscription:
    def __init__(
        self,
        hub: LiveHub,
        event_id: int,
        attendee_id: int | None,
        maxsize: int,
        kinds: frozenset[Kind] | None = None,
        on_queued: Callable[[LiveEvent], None] | None = None,
    ) -> None:
        self.hub = hub
        self.event_id = event_id
        self.attendee_id = attendee_id  # None = everything in the event (instructor)
        self.kinds = kinds  # None = every kind; ``resync`` comes anyway
        self.on_queued = on_queued  # called in the reading loop as an event is queued
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
        if self.kinds is not None and ev.kind not in self.kinds:
            return False
        return self.attendee_id is None or ev.attendee_id in (None, self.attendee_id)

    def offer(self, ev: LiveEvent) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(ev)
            if self.on_queued is not None and self._loop is not None:
                self.on_queued(ev)
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
        self.hub.unsubscribe(self)


class LiveHub:
    """Subscriptions are indexed by (event, attendee): publishing an attendee's event touches that
    attendee's subscriptions and the event's instructors' only, not the whole room (the fair queue
    tells every waiting check its new place each time one starts: at 300 streams a scan of all of
    them per event held the loop for seconds, bench/rehearsal.py)."""

    def __init__(self, maxsize: int = 1000, keep: int = 256) -> None:
        self._subs: set[Subscription] = set()
        self._index: dict[tuple[int, int | None], set[Subscription]] = {}
        self._seq = itertools.count(1)
        self.maxsize = maxsize
        self.keep = keep
        self.computed = 0  # calls of ``once``'s functions (tests: one per event, not one per stream)
        self.published: collections.Counter[str] = collections.Counter()  # events by kind
        self.delivered = 0  # events handed to subscriptions (one event to 3 streams: 3)
        self.encoded = 0  # live events encoded as JSON (once per event and render, not once per stream)
        self._once: OrderedDict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = OrderedDict()

    async def once(self, ev: LiveEvent, fn: Callable[[], T]) -> T:
        """``fn()`` for ``ev``, computed once for every subscriber that asks: the first caller runs it
        in a worker thread, the others await the same result (so ``fn`` may read the database without
        holding up the loop, once per event rather than once per stream). A caller that goes away
        while waiting does not cancel it for the others; the results of the last ``keep`` events
        are kept, then dropped. ``fn`` must not depend on who asks."""
        return await asyncio.shield(self.start_once(ev, fn))  # type: ignore[no-any-return]

    def start_once(self, ev: LiveEvent, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        """:meth:`once`'s job for ``ev``, started now if it is not yet (call in the running loop):
        a stream starts it the moment the event is queued for it (``on_queued``), so the reads of
        many events run side by side instead of one after another as the stream gets to each."""
        loop = asyncio.get_running_loop()
        job = self._once.get(ev.seq)
        if job is not None and job[0] is loop:
            return job[1]
        self.computed += 1
        future: asyncio.Future[Any] = asyncio.ensure_future(asyncio.to_thread(fn))
        self._once[ev.seq] = (loop, future)
        while len(self._once) > self.keep:
            self._once.popitem(last=False)
        return future

    def subscribe(
        self,
        event_id: int,
        attendee_id: int | None = None,
        *,
        kinds: frozenset[Kind] | None = None,
        on_queued: Callable[[LiveEvent], None] | None = None,
    ) -> Subscription:
        """A subscription to one event: one attendee's events plus the event-wide ones, or (``None``)
        everything of the event; only ``kinds`` when given (an instructor stream leaves out what it
        never shows, so a room's queue positions cannot fill its queue). ``on_queued(ev)`` runs in
        the subscriber's loop as each event is queued (a stream starts its render's work early)."""
        sub = Subscription(self, event_id, attendee_id, self.maxsize, kinds, on_queued)
        self._subs.add(sub)
        self._index.setdefault((event_id, attendee_id), set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)
        key = (sub.event_id, sub.attendee_id)
        subs = self._index.get(key)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._index[key]

    def publish(self, kind: Kind, event_id: int, attendee_id: int | None = None, **data: Any) -> LiveEvent:
        """Deliver one event to every subscriber that wants it; call only after the commit of the
        change it describes. ``kind`` must be a :class:`Kind` (a plain string is accepted only when
        it names one; anything else raises ``ValueError``)."""
        ev = LiveEvent(Kind(kind), event_id, attendee_id, data, next(self._seq))
        self.published[ev.kind] += 1
        if attendee_id is None:  # event-wide (announcements, pace: rare): every subscription of the event
            targets: list[Subscription] = list(self._subs)
        else:
            targets = [*self._index.get((event_id, attendee_id), ()), *self._index.get((event_id, None), ())]
        for sub in targets:
            if sub.wants(ev):
                self.delivered += 1
                sub.deliver(ev)
        return ev

    def memo(self, ev: LiveEvent, name: str, fn: Callable[[], T]) -> T:
        """``fn()`` for ``ev`` computed once under ``name`` for every stream that asks (a grid delta
        and its JSON, built once for all the dashboards); counted in :attr:`encoded`. Call in the
        loop; ``fn`` must be quick (no I/O: see :meth:`once`) and must not depend on who asks."""
        memo: dict[str, Any] = ev.__dict__.setdefault("_memo", {})
        if name not in memo:
            self.encoded += 1
            memo[name] = fn()
        return memo[name]  # type: ignore[no-any-return]

    def encode(self, ev: LiveEvent) -> dict[str, str]:
        """``ev.sse()``, counted in :attr:`encoded` the first time (it is encoded once)."""
        if not ev.encoded:
            self.encoded += 1
        return ev.sse()

    def watched(self, event_id: int) -> bool:
        """Whether a stream of the whole event (a dashboard) is open now; safe from any thread (a
        publisher in a worker thread asks before it reads what only a dashboard shows)."""
        return bool(self._index.get((event_id, None)))

    def event_ids(self) -> list[int]:
        """The events with an open stream now (``lab.changed`` is published to each of them)."""
        return sorted({event_id for event_id, _attendee in list(self._index)})

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    async def stream(
        self,
        sub: Subscription,
        *,
        keepalive_s: float = 15.0,
        ready: dict[str, Any] | None = None,
        render: Callable[[LiveEvent], dict[str, str] | None | Awaitable[dict[str, str] | None]] | None = None,
    ) -> AsyncIterator[dict[str, str]]:
        """SSE dicts for ``sub``: first a ``ready`` event (the subscription is live; ``ready`` adds to
        its payload), then events, with a comment keepalive when idle. ``render`` turns an event into
        an SSE dict, or None to send nothing (default: :meth:`LiveEvent.sse`); it may be async (it
        must then never block the loop: see :meth:`once`). Unsubscribes when the client goes away."""
        try:
            yield {"event": "ready", "data": json.dumps({"kind": "ready", **(ready or {})})}
            while True:
                try:
                    ev = await asyncio.wait_for(sub.get(), keepalive_s)
                except TimeoutError:
                    yield {"comment": "keepalive"}
                    continue
                out = render(ev) if render else self.encode(ev)
                if inspect.isawaitable(out):
                    out = await out
                if out is not None:
                    yield out
        finally:
            sub.close()
