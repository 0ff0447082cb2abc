"""The fair check queue: who gets the next check slot (issue 13 item 6, starvation by cheap identities).

The server runs at most ``slots`` checks at once (``checks.max_concurrent``). Before this queue a
plain semaphore let 4 freely joined names hold all 4 slots with long checks, and a real attendee's
Check waited a minute. :func:`pick` is pure bookkeeping (no clock, no I/O, like
``backends/docker/scheduler.place``); :class:`CheckQueue` holds the state and calls it.

Rules
-----
- **One running check per attendee.** An attendee with a check running is not picked again until it
  ends (their other presses wait in their own FIFO order).
- **A per-attendee budget.** ``usage`` is the slot time (seconds) an attendee's checks held in the
  last ``window_s`` (running ones count so far). An attendee whose usage is at or above
  ``budget_s`` is *over budget*.
- **A reserved slot for attendees within budget.** Over-budget attendees together never hold more
  than ``slots - reserve`` slots, so however many names flood checks, an attendee within budget finds
  a free slot at once (or behind at most one other within-budget attendee's check).
- **FIFO across attendees, least usage first.** Among those who may run, attendees within budget go
  before those over it; then the attendee with less usage; then the one who has waited longest
  (their oldest waiting ticket). An attendee's own checks run in the order they were pressed.
- **A check that uses no CPU lends its slot.** A running check whose processes used less than
  ``idle_cpu_s`` CPU-seconds over the last ``idle_after_s`` seconds (attendee code that sleeps,
  waits for input or for a lock: the red team's four sleepers held every slot for a minute) is
  *idle*: it does not count against ``slots``, so the next waiting check starts beside it. At most
  ``max_lent`` (default ``slots``) idle checks are not counted at once, so at most ``slots +
  max_lent`` checks ever run. An idle check that computes again counts again (no new check starts
  until the running ones fit in ``slots``); it is never stopped for being idle: its wall budget ends
  it (checks/timeouts.py). Checks whose backend cannot measure them (no ``CheckMeter`` attached)
  are never idle.
- A waiting check's **position** is its place in the order :func:`order` gives (1 = next); the
  attendee's page shows it (live event ``check.queued``).
- **Positions are told by band** (:mod:`labserver.services.queue_places`): a waiting check is told
  its exact position when it is queued, and again only when its position enters another band. A slot
  handed on moves every waiting check one place, but only those on a band's edge are told: O(log n)
  live events per admission with n waiting, not n.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from labserver.backends.meter import ProcessMeter, sample_all
from labserver.observability import metrics
from labserver.services.queue_places import band


@dataclass(frozen=True)
class Ticket:
    attendee_id: int
    seq: int  # arrival order (smaller = earlier)


def order(
    waiting: Iterable[Ticket], *, running: Mapping[int, int], usage: Mapping[int, float], budget_s: float
) -> list[Ticket]:
    """Every waiting ticket in the order they would get a slot (module rules; running attendees
    last, since they cannot start before their check ends)."""
    first: dict[int, int] = {}
    for t in waiting:
        first[t.attendee_id] = min(first.get(t.attendee_id, t.seq), t.seq)

    def key(t: Ticket) -> tuple[int, int, float, int, int]:
        a = t.attendee_id
        return (
            1 if running.get(a, 0) else 0,
            1 if usage.get(a, 0.0) >= budget_s else 0,
            usage.get(a, 0.0),
            first[a],
            t.seq,
        )

    return sorted(waiting, key=key)


def pick(
    waiting: Iterable[Ticket],
    *,
    running: Mapping[int, int],
    usage: Mapping[int, float],
    slots: int,
    budget_s: float,
    reserve: int = 1,
    idle: Mapping[int, int] | None = None,
    max_lent: int = 0,
) -> list[Ticket]:
    """The tickets that start now, given who runs (``running``: attendee -> checks running), which
    of those are idle (``idle``: attendee -> idle checks, at most ``max_lent`` of them not counted)
    and their ``usage``; at most the free slots, honouring every rule of the module docstring."""
    ranked = order(waiting, running=running, usage=usage, budget_s=budget_s)
    return take(
        ranked,
        running=running,
        usage=usage,
        slots=slots,
        budget_s=budget_s,
        reserve=reserve,
        idle=idle,
        max_lent=max_lent,
    )


def take(
    ranked: list[Ticket],
    *,
    running: Mapping[int, int],
    usage: Mapping[int, float],
    slots: int,
    budget_s: float,
    reserve: int = 1,
    idle: Mapping[int, int] | None = None,
    max_lent: int = 0,
) -> list[Ticket]:
    """:func:`pick` from tickets already in :func:`order`'s order."""
    idle = idle or {}
    idle_of = {a: min(idle.get(a, 0), n) for a, n in running.items()}
    lent = min(sum(idle_of.values()), max(max_lent, 0))
    busy = sum(running.values()) - lent
    over_busy = sum(n - idle_of[a] for a, n in running.items() if usage.get(a, 0.0) >= budget_s)
    cap_over = max(slots - max(reserve, 0), 1 if slots > 0 else 0)
    started: list[Ticket] = []
    now_running = dict(running)
    for t in ranked:
        if busy >= slots:
            break
        a = t.attendee_id
        if now_running.get(a, 0):
            continue
        over = usage.get(a, 0.0) >= budget_s
        if over and over_busy >= cap_over:
            continue
        started.append(t)
        now_running[a] = 1
        busy += 1
        over_busy += 1 if over else 0
    return started


@dataclass
class _Use:
    spans: deque[tuple[float, float]] = field(default_factory=deque)  # (start, end) finished
    running_since: float | None = None


@dataclass
class _Metered:
    """A running check with a meter: the CPU it had used when it last made progress, and when."""

    attendee_id: int
    meter: ProcessMeter
    cpu_s: float
    since: float
    idle: bool = False


class CheckQueue:
    """The server's check slots, handed out with :func:`pick`. ``async with queue.slot(attendee_id,
    on_position=...)`` waits for a slot; ``on_position(n)`` is called with the waiting position
    (1 = next) when the check is queued and whenever the position enters another :func:`band`, and
    not at all when a slot is free at once."""

    def __init__(
        self,
        slots: int,
        *,
        budget_s: float = 60.0,
        window_s: float = 600.0,
        reserve: int = 1,
        idle_after_s: float = 5.0,
        idle_cpu_s: float = 0.1,
        max_lent: int | None = None,
        tick_s: float = 1.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slots = slots
        self.budget_s = budget_s
        self.window_s = window_s
        self.reserve = reserve if slots > 1 else 0
        self.idle_after_s = idle_after_s  # 0: a running check always counts (no lending)
        self.idle_cpu_s = idle_cpu_s
        self.max_lent = slots if max_lent is None else max_lent
        self.tick_s = tick_s
        self._metered: dict[Ticket, _Metered] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._now = now
        self._seq = itertools.count()
        self._waiting: dict[Ticket, tuple[asyncio.Future[None], Callable[[int], None] | None]] = {}
        self._bands: dict[Ticket, int] = {}  # the band of the position last told
        self._use: dict[int, _Use] = {}
        self._running: dict[int, int] = {}

    # -- bookkeeping -------------------------------------------------------------------------------
    def usage(self, attendees: Iterable[int] | None = None) -> dict[int, float]:
        """Slot seconds in the window, of ``attendees`` (default: everyone seen)."""
        now = self._now()
        horizon = now - self.window_s
        out: dict[int, float] = {}
        for a in self._use if attendees is None else attendees:
            use = self._use.get(a)
            if use is None:
                out[a] = 0.0
                continue
            while use.spans and use.spans[0][1] < horizon:
                use.spans.popleft()
            total = sum(end - max(start, horizon) for start, end in use.spans)
            if use.running_since is not None:
                total += now - max(use.running_since, horizon)
            out[a] = total
        return out

    def waiting_count(self) -> int:
        return len(self._waiting)

    def running_count(self) -> int:
        """Checks holding a slot now (lent slots included)."""
        return sum(self._running.values())

    def idle(self) -> dict[int, int]:
        """attendee -> their running checks that are idle now (module rules)."""
        out: dict[int, int] = {}
        for m in self._metered.values():
            if m.idle:
                out[m.attendee_id] = out.get(m.attendee_id, 0) + 1
        return out

    def note_usage(self) -> bool:
        """Update which metered checks are idle from their meters' last samples and hand out the
        slots they lend; True when that changed."""
        now, changed = self._now(), False
        for m in self._metered.values():
            sample = m.meter.last
            if sample is not None and sample.cpu_s - m.cpu_s >= self.idle_cpu_s:
                m.cpu_s, m.since = sample.cpu_s, now
            idle = sample is not None and now - m.since >= self.idle_after_s
            changed |= idle != m.idle
            m.idle = idle
        if changed:
            self._dispatch()
        return changed

    async def _tick(self) -> None:
        """While metered checks run: sample them (one read of /proc, in a worker thread), then hand
        out the slots idle checks lend."""
        while self._metered:
            await asyncio.sleep(self.tick_s)
            await asyncio.to_thread(sample_all, [m.meter for m in list(self._metered.values())])
            self.note_usage()

    def _dispatch(self) -> None:
        """Start what :func:`take` allows, then tell the waiting checks whose band changed. One
        ranking per call (a sort of the waiting, in C); the usage of those waiting or running only."""
        usage = self.usage({t.attendee_id for t in self._waiting} | set(self._running))
        ranked = order(self._waiting, running=self._running, usage=usage, budget_s=self.budget_s)
        started = take(
            ranked,
            running=self._running,
            usage=usage,
            slots=self.slots,
            budget_s=self.budget_s,
            reserve=self.reserve,
            idle=self.idle(),
            max_lent=self.max_lent,
        )
        for t in started:
            fut, _ = self._waiting.pop(t)
            self._bands.pop(t, None)
            self._start(t.attendee_id)
            fut.set_result(None)
        if started:  # what order() would now give: the started left, their attendees' others go last
            gone = set(started)
            left = [t for t in ranked if t not in gone]
            ranked = [t for t in left if not self._running.get(t.attendee_id)]
            ranked += [t for t in left if self._running.get(t.attendee_id)]
        for i, t in enumerate(ranked, start=1):
            _, cb = self._waiting[t]
            now_band = band(i)
            if cb is not None and self._bands.get(t) != now_band:
                self._bands[t] = now_band
                cb(i)

    def _start(self, attendee_id: int) -> None:
        self._running[attendee_id] = self._running.get(attendee_id, 0) + 1
        self._use.setdefault(attendee_id, _Use()).running_since = self._now()

    def _end(self, attendee_id: int) -> None:
        use = self._use[attendee_id]
        if use.running_since is not None:
            use.spans.append((use.running_since, self._now()))
            use.running_since = None
        self._running[attendee_id] -= 1
        if not self._running[attendee_id]:
            del self._running[attendee_id]

    def _watch(self, ticket: Ticket, meter: ProcessMeter) -> None:
        if self.idle_after_s <= 0:
            return
        self._metered[ticket] = _Metered(ticket.attendee_id, meter, 0.0, self._now())
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    @asynccontextmanager
    async def slot(
        self,
        attendee_id: int,
        on_position: Callable[[int], None] | None = None,
        meter: ProcessMeter | None = None,
    ) -> AsyncIterator[None]:
        """Wait for a slot, hold it for the ``async with`` block. ``meter``: what the check run in
        the block uses (it lends its slot while idle: module rules)."""
        ticket, asked = Ticket(attendee_id, next(self._seq)), self._now()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[ticket] = (fut, on_position)
        self._dispatch()
        try:
            await fut
        except BaseException:
            if ticket in self._waiting:  # cancelled while waiting
                del self._waiting[ticket]
                self._bands.pop(ticket, None)
                self._dispatch()
            elif fut.done() and not fut.cancelled():  # got the slot as it was cancelled
                self._end(attendee_id)
                self._dispatch()
            raise
        metrics.note_check_wait(self._now() - asked)
        if meter is not None:
            self._watch(ticket, meter)
        try:
            yield
        finally:
            self._metered.pop(ticket, None)
            self._end(attendee_id)
            self._dispatch()
