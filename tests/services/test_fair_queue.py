"""The rules of services/grading/fair_queue.py ``pick()``/``order()``, one by one (pure: no clock, no I/O)."""

from __future__ import annotations

import asyncio

from labserver.backends.base import CheckUsage
from labserver.backends.meter import ProcessMeter
from labserver.services.grading.fair_queue import CheckQueue, Ticket, order, pick
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


def test_idle_checks_lend_their_slot_up_to_max_lent() -> None:
    four = {1: 1, 2: 1, 3: 1, 4: 1}
    waiting = [T(9, 9), T(8, 10)]
    # four sleepers hold the four slots: nobody starts ...
    assert pick(waiting, running=four, usage={}, slots=4, budget_s=60) == []
    # ... unless they are idle: then they do not count
    idle = {1: 1, 2: 1, 3: 1, 4: 1}
    assert pick(waiting, running=four, usage={}, slots=4, budget_s=60, idle=idle, max_lent=4) == waiting
    # at most max_lent of them are not counted
    assert pick(waiting, running=four, usage={}, slots=4, budget_s=60, idle=idle, max_lent=1) == [T(9, 9)]
    # an idle check of someone not running (stale) lends nothing
    assert pick(waiting, running=four, usage={}, slots=4, budget_s=60, idle={7: 1}, max_lent=4) == []


class SetMeter(ProcessMeter):
    """The real meter whose last sample the test sets (no processes)."""

    def __init__(self) -> None:
        super().__init__()
        self.usage: CheckUsage | None = None

    @property
    def last(self) -> CheckUsage | None:
        return self.usage


def test_a_check_using_no_cpu_for_idle_after_s_lends_its_slot_and_takes_it_back() -> None:
    async def scenario() -> list[str]:
        t = [0.0]
        q = CheckQueue(1, idle_after_s=5, idle_cpu_s=0.1, tick_s=3600, now=lambda: t[0])
        seen: list[str] = []
        sleeper_meter, victim_meter = SetMeter(), SetMeter()
        release = asyncio.Event()

        async def sleeper() -> None:
            async with q.slot(1, meter=sleeper_meter):
                seen.append("sleeper runs")
                await release.wait()

        async def victim() -> None:
            async with q.slot(2, meter=victim_meter):
                seen.append("victim runs")

        a = asyncio.create_task(sleeper())
        await asyncio.sleep(0)
        b = asyncio.create_task(victim())
        await asyncio.sleep(0)
        assert seen == ["sleeper runs"] and q.waiting_count() == 1
        sleeper_meter.usage = CheckUsage(0.5, 0.0)  # started: imports cost CPU
        t[0] = 1.0
        assert not q.note_usage()
        t[0] = 5.5  # 4.5 s without progress: not yet
        sleeper_meter.usage = CheckUsage(0.55, 0.0)
        assert not q.note_usage()
        t[0] = 6.1  # 5.1 s
        assert q.note_usage() and q.idle() == {1: 1}  # and the victim got the lent slot
        await asyncio.sleep(0)
        await asyncio.wait_for(b, 10)  # a hang here: the idle slot was never lent
        assert seen == ["sleeper runs", "victim runs"]
        sleeper_meter.usage = CheckUsage(2.0, 0.0)  # it computes again: it counts again
        t[0] = 7.0
        assert q.note_usage() and q.idle() == {}
        release.set()
        await a
        return seen

    asyncio.run(scenario())


def test_without_a_meter_or_with_lending_off_a_running_check_always_counts() -> None:
    async def scenario() -> None:
        t = [0.0]
        for q, meter in (
            (CheckQueue(1, idle_after_s=5, tick_s=3600, now=lambda: t[0]), None),
            (CheckQueue(1, idle_after_s=0, tick_s=3600, now=lambda: t[0]), SetMeter()),
        ):
            release = asyncio.Event()

            async def hold() -> None:
                async with q.slot(1, meter=meter):  # noqa: B023
                    await release.wait()  # noqa: B023

            task = asyncio.create_task(hold())
            await asyncio.sleep(0)
            if meter is not None:
                meter.usage = CheckUsage(0.0, 0.0)
            t[0] += 100
            q.note_usage()
            assert q.idle() == {}
            release.set()
            await task

    asyncio.run(scenario())


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
