"""Open streams, terminal views and shares of staff end within seconds of their right to them.

A staff SSE stream or terminal socket outlives the request that checked its rights, and a share
outlives the request that asked it. So each one is *held* here (:meth:`StaffWatch.hold`, with the
event it shows), and one task (:meth:`StaffWatch.run`, started by the app) looks every
``revoke_poll_s`` seconds whether each holder's principal still may see that event: the session
not ended (signed out, removed by an organiser or by ``labserver staff remove`` in another
process), not expired, the person not removed, a role on the event still there; for the
bootstrap token, the token still on and unchanged. A holder that may not is ended: its
``ended`` event is set (the stream or socket closes itself: :func:`until_ended`, the terminal
socket's 4403 "signed out") and every share its principal asked is ended
(:func:`labserver.services.help_share.end`). An organiser's removal in this server looks at once
(:meth:`StaffWatch.poke`) instead of at the next tick.

The look is one short session per tick for all holders (a few rows per distinct principal), in a
worker thread; with nothing held, nothing is read."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from labserver.services.staff.roles import Action, Principal, may

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Held:
    id: int
    principal: Principal
    event_id: int
    ended: asyncio.Event = field(default_factory=asyncio.Event)


#: (principal, event id) -> still allowed; run in a worker thread
Judge = Callable[[list[tuple[Principal, int]]], list[bool]]


class StaffWatch:
    """Every held stream and socket of staff, ended when the watch finds their right gone."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.held: dict[int, Held] = {}
        #: share id -> (who asked it, its event): a share ends with its asker's right
        self.askers: dict[int, tuple[Principal, int]] = {}
        self._poke: asyncio.Event | None = None

    def hold(self, principal: Principal, event_id: int) -> Held:
        held = Held(next(self._ids), principal, event_id)
        self.held[held.id] = held
        return held

    def release(self, held: Held) -> None:
        self.held.pop(held.id, None)

    def guard(self, principal: Principal, event_id: int, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """``stream`` (a staff SSE stream of ``event_id``), held: it ends when the right goes."""
        held = self.hold(principal, event_id)
        return until_ended(held, stream, lambda: self.release(held))

    def hold_share(self, share_id: int, principal: Principal, event_id: int) -> None:
        self.askers[share_id] = (principal, event_id)

    def poke(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Look now, not at the next tick (a sign-out or removal in this server); any thread
        (``loop``: the server's, where :meth:`run` waits)."""
        poke = self._poke
        if poke is None:
            return
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(poke.set)
        else:
            poke.set()

    async def run(
        self,
        judge: Judge,
        shares_of: Callable[[], list[tuple[Principal, int, Callable[[], None]]]],
        *,
        every_s: float,
    ) -> None:
        """Forever: judge every holder and every live share's asker, end those no longer allowed."""
        self._poke = poke = asyncio.Event()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(poke.wait(), timeout=every_s)
            poke.clear()
            try:
                await self.look(judge, shares_of)
            except Exception:  # a database hiccup must not stop the watch
                log.exception("the staff watch could not look")

    async def look(
        self, judge: Judge, shares_of: Callable[[], list[tuple[Principal, int, Callable[[], None]]]]
    ) -> int:
        """One look; returns how many holders and shares it ended."""
        helds = list(self.held.values())
        shares = shares_of()
        pairs = [(h.principal, h.event_id) for h in helds] + [(p, e) for p, e, _end in shares]
        if not pairs:
            return 0
        verdicts = await asyncio.to_thread(judge, pairs)
        ended = 0
        for held, ok in zip(helds, verdicts[: len(helds)], strict=True):
            if not ok:
                held.ended.set()
                self.release(held)
                ended += 1
        for (_p, _e, end), ok in zip(shares, verdicts[len(helds) :], strict=True):
            if not ok:
                end()
                ended += 1
        return ended


def still_allowed(principal: Principal, fresh: Principal | None, event_id: int) -> bool:
    """Whether ``fresh`` (the principal as the database has it now; None: gone) may still see
    ``event_id`` (pure)."""
    if fresh is None or fresh.key != principal.key:
        return False
    return may(fresh.grants, Action.view, event_id)


async def until_ended(held: Held, stream: AsyncIterator[T], on_end: Callable[[], None]) -> AsyncIterator[T]:
    """``stream``'s items until it ends or ``held`` is ended (then ``stream`` is closed)."""
    ended: asyncio.Future[Any] = asyncio.ensure_future(held.ended.wait())
    try:
        while True:
            nxt: asyncio.Future[Any] = asyncio.ensure_future(anext(stream))
            waits: set[asyncio.Future[Any]] = {nxt, ended}
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await nxt
                return
            try:
                item = nxt.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        ended.cancel()
        on_end()
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
