"""The rules of services/fair_queue.py ``pick()``/``order()``, one by one (pure: no clock, no I/O)."""

from __future__ import annotations

import asyncio

from labserver.services.fair_queue import CheckQueue, Ticket, order, pick


def T(a: int, seq: int) -> Ticket:
    return Ticket(a, seq)


def test_one_running_check_per_attendee() -> None:
    got = pick([T(1, 0), T(1, 1), T(2, 2)], running={}, usage={}, slots=4, budget_s=60)
    assert got == [T(1, 0), T(2, 2)]
    assert pick([T(1, 3)], running={1: 1}, usage={}, slots=4, budget_s=60) == []


def test_over_budget_never_take_the_reserved_slot() -> None:
    flood = {a: 100.0 for a in (1, 2, 3, 4)}
    waiting = [T(a, a) for a in (1, 2, 3, 4)]
    assert pick(waiting, running={}, usage=flood, slots=4, budget_s=60) == [T(1, 1), T(2, 2), T(3, 3)]
    # the fourth slot is there for a normal attendee, at once
    running = {1: 1, 2: 1, 3: 1}
    assert pick([T(4, 4), T(9, 5)], running=running, usage=flood, slots=4, budget_s=60) == [T(9, 5)]


def test_within_budget_and_less_usage_first_then_fifo() -> None:
    usage = {1: 100.0, 2: 10.0, 3: 0.0, 4: 0.0}
    waiting = [T(1, 0), T(2, 1), T(4, 2), T(3, 3)]
    assert order(waiting, running={}, usage=usage, budget_s=60) == [T(4, 2), T(3, 3), T(2, 1), T(1, 0)]
    assert pick(waiting, running={}, usage=usage, slots=1, budget_s=60) == [T(4, 2)]


def test_queue_reports_positions_and_hands_slots_on() -> None:
    async def scenario() -> list[tuple[str, int]]:
        q = CheckQueue(1, budget_s=60, now=lambda: 0.0)
        seen: list[tuple[str, int]] = []
        hold = asyncio.Event()

        async def one(a: int, name: str) -> None:
            async with q.slot(a, on_position=lambda p: seen.append((name, p))):
                seen.append((name, 0))
                await hold.wait()

        first = asyncio.create_task(one(1, "a"))
        await asyncio.sleep(0)
        rest = [asyncio.create_task(one(2, "b")), asyncio.create_task(one(3, "c"))]
        await asyncio.sleep(0)
        hold.set()
        await asyncio.gather(first, *rest)
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] == ("a", 0)
    assert ("b", 1) in seen and ("c", 2) in seen and ("c", 1) in seen
    assert [s for s in seen if s[1] == 0] == [("a", 0), ("b", 0), ("c", 0)]
