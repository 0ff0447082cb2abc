"""The rules of services/fair_queue.py ``pick()``/``order()``, one by one (pure: no clock, no I/O)."""

from __future__ import annotations

import asyncio

from labserver.services.fair_queue import CheckQueue, Ticket, order, pick
from labserver.services.queue_places import band, bands_up_to


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


def test_bands_are_exact_near_the_front_then_about_a_fifth_apart() -> None:
    assert [band(p) for p in (1, 2, 6, 7, 8, 9, 11, 13, 16, 21, 31, 101, 121, 301)] == [
        1, 2, 6, 8, 8, 10, 12, 15, 20, 25, 40, 120, 150, 400,
    ]  # fmt: skip
    assert bands_up_to(300) == len({band(p) for p in range(1, 301)}) == 23
    assert bands_up_to(1000) == 28 and bands_up_to(1) == 1


def _admit_one_with(waiting: int) -> tuple[int, list[tuple[int, int]]]:
    """(tellings when the running check ends and the first waiting one starts, the last position
    told to each waiting check and its real position after that), for a queue of ``waiting``."""

    async def scenario() -> tuple[int, list[tuple[int, int]]]:
        q = CheckQueue(1, budget_s=60, now=lambda: 0.0)
        told: dict[int, int] = {}
        tellings = [0]
        gates = {a: asyncio.Event() for a in range(waiting + 1)}

        def tell(a: int, position: int) -> None:
            told[a] = position
            tellings[0] += 1

        async def one(a: int) -> None:
            async with q.slot(a, on_position=lambda p: tell(a, p)):
                await gates[a].wait()

        tasks = [asyncio.create_task(one(a)) for a in range(waiting + 1)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert q.waiting_count() == waiting and tellings[0] == waiting  # each told once, when queued
        tellings[0] = 0
        gates[0].set()  # attendee 0's check ends: attendee 1's starts, everyone else moves up one
        for _ in range(3):
            await asyncio.sleep(0)
        assert q.waiting_count() == waiting - 1
        out = tellings[0], [(told[a], a - 1) for a in range(2, waiting + 1)]
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        return out

    return asyncio.run(scenario())


def test_admitting_one_check_tells_one_waiting_check_per_band_not_the_whole_queue() -> None:
    tellings, positions = _admit_one_with(300)
    # before bands, all 299 waiting checks were told their new place (300 live events per admission)
    assert tellings <= bands_up_to(300) == 23
    # what each page shows is its real place's band (exact up to 6, then at most a band too high)
    assert all(band(shown) == band(real) and shown >= real for shown, real in positions)
    assert [shown for shown, real in positions if real <= 6] == [1, 2, 3, 4, 5, 6]
    # three times the queue: a few more band edges, not three times the tellings
    assert _admit_one_with(900)[0] <= bands_up_to(900) == 28
