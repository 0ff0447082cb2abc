"""The admission queue: in order, at most ``limit`` at once, places told, the limit changed at run
time, a waiter that leaves gives its place on; a start the engine has no room for stays queued and
is retried when room frees."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlmodel import Session

from labserver.app import build_context
from labserver.backends.base import EnvRef, EnvSpec, ProgressCallback, ProvisionError
from labserver.backends.local import LocalBackend
from labserver.config import Settings
from labserver.live import Kind
from labserver.services.joining.events import create_event, join
from labserver.services.provisioning.admission import Admission
from labserver.services.provisioning.environments import admitted_create, spec_for
from labserver.services.queue_places import band, bands_up_to


async def _runner(
    adm: Admission, key: str, order: list[str], places: dict[str, list[int]], go: asyncio.Event
) -> None:
    async with adm.slot(key, lambda ahead: places.setdefault(key, []).append(ahead)):
        order.append(key)
        await go.wait()


def test_starts_are_granted_in_order_with_a_limit_and_told_their_place() -> None:
    async def go() -> None:
        adm = Admission(2)
        order: list[str] = []
        places: dict[str, list[int]] = {}
        gates = {k: asyncio.Event() for k in "abcdef"}
        tasks = []
        for key in "abcdef":
            tasks.append(asyncio.ensure_future(_runner(adm, key, order, places, gates[key])))
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert order == ["a", "b"] and adm.snapshot() == {"limit": 2, "starting": 2, "queued": 4}
        assert places["c"][0] == 0 and places["f"][0] == 3  # told at once how many are ahead
        tasks[3].cancel()  # "d" leaves the queue: "e" and "f" move up
        for _ in range(5):
            await asyncio.sleep(0)
        assert places["f"][-1] == 2  # c, e ahead
        gates["a"].set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["a", "b", "c"]
        adm.set_limit(4)  # the instructor raises it: the rest start now, in order
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["a", "b", "c", "e", "f"]
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert adm.snapshot() == {"limit": 4, "starting": 0, "queued": 0}

    asyncio.run(go())


class FullOnceLocalFakeEngine(LocalBackend):
    """The real local backend that answers "no room" (``capacity``) to the first create."""

    refused = 0

    async def create(self, spec: EnvSpec, progress: ProgressCallback | None = None) -> EnvRef:
        if not self.refused:
            self.refused += 1
            raise ProvisionError("The lab machines are full right now.", reason="capacity")
        return await super().create(spec, progress)


def test_a_start_with_no_room_stays_queued_and_is_retried_when_room_frees(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", instructor_token="t")
    settings.admission.retry_s = 3600  # only room_freed() can wake it
    ctx = build_context(settings)
    ctx.backend = FullOnceLocalFakeEngine(settings)
    with Session(ctx.engine, expire_on_commit=False) as session:
        event = create_event(session, title="t", labs=["getting-started"], code="FULL")
        attendee, _token, event = join(session, event_code="FULL", name="Ada")
    spec = spec_for(ctx, event, attendee)

    async def go() -> None:
        sub = ctx.live.subscribe(event.id or 0, attendee.id)
        start = asyncio.ensure_future(admitted_create(ctx, spec))
        while True:
            ev = await asyncio.wait_for(sub.get(), 30)
            if ev.kind == Kind.env_queue and "full" in ev.data["message"]:
                break
        assert not start.done() and ctx.backend.refused == 1  # type: ignore[attr-defined]
        ctx.admission.room_freed()
        ref = await asyncio.wait_for(start, 60)
        assert ref.env_id == spec.env_id

    asyncio.run(go())


def test_a_start_granted_tells_one_waiter_per_band_not_the_whole_queue() -> None:
    async def go() -> tuple[int, dict[str, int]]:
        adm = Admission(1)
        order: list[str] = []
        places: dict[str, list[int]] = {}
        keys = [f"e{i}" for i in range(301)]
        gates = {k: asyncio.Event() for k in keys}
        tasks = [asyncio.ensure_future(_runner(adm, k, order, places, gates[k])) for k in keys]
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["e0"] and sum(map(len, places.values())) == 300  # each told once, on joining
        before = sum(map(len, places.values()))
        gates["e0"].set()  # one start ends, the next is granted: 299 waiters move up one
        for _ in range(5):
            await asyncio.sleep(0)
        tellings = sum(map(len, places.values())) - before
        last = {k: told[-1] for k, told in places.items()}
        for gate in gates.values():
            gate.set()
        await asyncio.gather(*tasks)
        return tellings, last

    tellings, last = asyncio.run(go())
    assert tellings <= bands_up_to(300) == 23  # was 299: every waiter, every start
    # what each terminal said last is its real place's band: exact for the first six
    assert [last[f"e{i}"] for i in range(2, 8)] == [0, 1, 2, 3, 4, 5]
    assert all(band(last[f"e{i}"] + 1) == band(i - 1) for i in range(2, 301))
