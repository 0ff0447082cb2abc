"""At most ``LABSERVER_DOCKER__ENGINE_CONCURRENCY`` create / start calls at once per Docker engine.

A room joining at once asks one engine for 30 containers in the same second; the daemon serialises
much of that work internally (layer mounts, network setup), so 30 concurrent calls only make every
one of them slow, and the engine's API timeout (30 s) then fails the last ones. :class:`EngineSlots`
gives each engine a semaphore; callers wait in order (asyncio semaphores are FIFO) and the waits are
counted, so the server's metrics can show whether the engine is the bottleneck.

:meth:`EngineSlots.stats` is the reading side (no lock, cheap, call it as often as you like).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass


@dataclass
class SlotStats:
    """One engine's counters. ``waits`` / ``wait_s_total`` only grow; the others are gauges."""

    limit: int
    in_use: int = 0  # calls running now
    waiting: int = 0  # callers queued for a slot now
    calls: int = 0  # calls that got a slot (total)
    waits: int = 0  # calls that had to queue (total)
    wait_s_total: float = 0.0  # seconds spent queued (total)
    wait_s_max: float = 0.0  # the longest single wait


class EngineSlots:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("LABSERVER_DOCKER__ENGINE_CONCURRENCY must be at least 1")
        self.limit = limit
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._stats: dict[str, SlotStats] = {}

    def _for(self, engine: str) -> tuple[asyncio.Semaphore, SlotStats]:
        if engine not in self._sems:
            self._sems[engine] = asyncio.Semaphore(self.limit)
            self._stats[engine] = SlotStats(self.limit)
        return self._sems[engine], self._stats[engine]

    @contextlib.asynccontextmanager
    async def slot(self, engine: str) -> AsyncIterator[None]:
        """Hold one of ``engine``'s slots for the duration of the block."""
        sem, st = self._for(engine)
        start = time.monotonic()
        queued = sem.locked()
        st.waiting += 1
        try:
            await sem.acquire()
        finally:
            st.waiting -= 1
        waited = time.monotonic() - start
        st.calls += 1
        if queued:
            st.waits += 1
            st.wait_s_total += waited
            st.wait_s_max = max(st.wait_s_max, waited)
        st.in_use += 1
        try:
            yield
        finally:
            st.in_use -= 1
            sem.release()

    def stats(self) -> dict[str, dict[str, float]]:
        """``{engine node name: {limit, in_use, waiting, calls, waits, wait_s_total, wait_s_max}}``
        for every engine that has had a call."""
        return {name: asdict(st) for name, st in self._stats.items()}
