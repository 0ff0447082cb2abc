"""Admission: environment starts wait their turn instead of piling onto the engines.

One FIFO per server. At most :attr:`Admission.limit` starts run at once (``LABSERVER_ADMISSION__
CONCURRENT_STARTS``; 0 = :func:`default_limit` of the backend); the instructor reads and changes it
at run time (``GET/PUT /api/v1/instructor/admission``, the dashboard's control).

Promises:

- Tickets are granted in the order they were asked for; raising the limit grants more at once,
  lowering it lets running starts finish and grants no new one until below the limit.
- Every waiting ticket is told its place (``ahead``: starts granted before it, waiting) when it
  joins, and again when the queue's move puts it in another band
  (:mod:`labserver.services.queue_places`: exact for the first six, then about a fifth apart); the
  caller publishes it (``env.queue``, no database). A start granted tells O(log n) of the n waiting,
  not all of them.
- A waiter that goes away (cancelled) leaves the queue and its place is given on.
- Nothing here times out: a queued start waits as long as the queue needs.
- :meth:`room_freed` wakes starts that found the engines full (``capacity`` / ``no-room``) so they
  retry at once instead of at their next retry tick.

No database connection is held by anything waiting here (the caller releases first)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from labserver.observability import metrics
from labserver.services.queue_places import band

#: backend reasons that mean "no room now": the start stays queued and is retried
CAPACITY_REASONS = frozenset({"capacity", "no-room"})


def default_limit(backend_name: str) -> int:
    """Starts at once when the setting is 0: the local backend forks a sandbox (cheap); Docker
    creates and starts containers, and each engine already takes at most
    ``LABSERVER_DOCKER__ENGINE_CONCURRENCY`` (8) calls at once, so 8 starts keep it busy without
    queueing twice (bench/room.py, 30 at once on 2 cores: all usable after 14.2 s with 4, 8.1 s with 8)."""
    if backend_name == "docker":
        return 8
    return max(4, 2 * (os.cpu_count() or 2))


@dataclass
class Ticket:
    key: str
    on_place: Callable[[int], None]
    told: int = 0  # the band of the place last told (0: not told yet)
    granted: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Admission:
    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self.running = 0
        self.waiting: list[Ticket] = []
        self._room = asyncio.Event()

    @property
    def limit(self) -> int:
        return self._limit

    def set_limit(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._grant()

    @contextlib.asynccontextmanager
    async def slot(self, key: str, on_place: Callable[[int], None]) -> AsyncIterator[None]:
        """Wait for a turn (``on_place(ahead)`` as the queue moves), run the body, give the turn on."""
        ticket = Ticket(key, on_place)
        self.waiting.append(ticket)
        metrics.ENV_QUEUE.set(len(self.waiting))
        self._grant()
        if not ticket.granted.done():
            self._tell(ticket, self.waiting.index(ticket))
        try:
            await ticket.granted
        except asyncio.CancelledError:
            if ticket in self.waiting:
                self.waiting.remove(ticket)
                self._moved()
            elif ticket.granted.done() and not ticket.granted.cancelled():
                self._done()
            raise
        try:
            yield
        finally:
            self._done()

    def _done(self) -> None:
        self.running -= 1
        self._grant()

    def _grant(self) -> None:
        granted = False
        while self.waiting and self.running < self._limit:
            ticket = self.waiting.pop(0)
            if ticket.granted.done():  # cancelled meanwhile
                continue
            self.running += 1
            ticket.granted.set_result(None)
            granted = True
        if granted:
            self._moved()

    def _moved(self) -> None:
        metrics.ENV_QUEUE.set(len(self.waiting))
        for ahead, ticket in enumerate(self.waiting):
            self._tell(ticket, ahead)

    @staticmethod
    def _tell(ticket: Ticket, ahead: int) -> None:
        now = band(ahead + 1)
        if ticket.told != now:
            ticket.told = now
            ticket.on_place(ahead)

    def room_freed(self) -> None:
        """An environment stopped or was removed: starts waiting for room retry now."""
        self._room.set()
        self._room = asyncio.Event()

    async def wait_for_room(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), timeout_s)

    def snapshot(self) -> dict[str, int]:
        return {"limit": self._limit, "starting": self.running, "queued": len(self.waiting)}
