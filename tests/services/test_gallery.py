"""The gallery's one stream, fed from real shells (local backend): a terminal printing a megabyte
between two ticks yields one bounded update per tick; nothing is sent without a tick; an idle
terminal sends nothing; another event's terminal never appears."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from sqlmodel import Session

from labserver.models import Attendee, Event
from labserver.routes.instructor.gallery import gallery_stream
from labserver.routes.terminal import open_session
from labserver.services.joining.events import create_event, join
from labserver.services.provisioning import environments
from labserver.services.support.gallery import COLS, ROWS, GalleryFeed, delta, event_envs
from labserver.terminals.sessions import TerminalSession

LAB = "getting-started"
MEGABYTE = b"head -c 1000000 /dev/zero | tr '\\0' x; echo; seq 1 30; echo mark-%s-$((40+2))\r"
#: one update: at most ROWS lines of COLS characters, plus the list's few numbers and quotes
UPDATE_MAX = ROWS * (COLS + 4) + 64


async def until(condition: Callable[[], bool], timeout: float = 60) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


async def shell(app: FastAPI, event: Event, attendee: Attendee) -> TerminalSession:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as db:
        ref = await environments.ensure_environment(ctx, db, event=event, attendee=attendee)
    session = await open_session(ctx, ref, LAB, 100, 30)
    assert session is not None
    await asyncio.wait_for(session.ready.wait(), 60)
    return session


async def print_megabyte(session: TerminalSession, tag: str) -> None:
    before = session.output_bytes
    await session.write(MEGABYTE % tag.encode())
    await until(lambda: f"mark-{tag}-42".encode() in session.scrollback)
    assert session.output_bytes - before >= 1_000_000


def test_a_megabyte_between_ticks_is_one_bounded_update_per_tick(app: FastAPI, event: Event) -> None:
    ctx = app.state.ctx
    with Session(ctx.engine, expire_on_commit=False) as db:
        busy, _, _ = join(db, event_code=event.code, name="Busy")
        idle, _, _ = join(db, event_code=event.code, name="Idle")
        other_event = create_event(db, title="Other", labs=[LAB], code="OTHER1")
        stranger, _, _ = join(db, event_code="OTHER1", name="Stranger")

    async def go() -> None:
        loud = await shell(app, event, busy)
        await shell(app, event, idle)
        foreign = await shell(app, other_event, stranger)
        ticks: asyncio.Queue[None] = asyncio.Queue()

        async def tick_source() -> AsyncIterator[None]:
            while True:
                await ticks.get()
                yield None

        feed = GalleryFeed(ctx.terminals, await asyncio.to_thread(event_envs, ctx.engine, event.id or 0))
        sub = ctx.live.subscribe(event.id or 0)
        stream = gallery_stream(ctx, event, sub, feed, tick_source())
        try:
            assert (await anext(stream))["event"] == "ready"
            view: dict[int, list[str]] = {}  # what the page shows, rebuilt from the updates
            for n in range(3):
                pending = asyncio.ensure_future(anext(stream))
                await print_megabyte(loud, f"{n}a")
                await print_megabyte(loud, f"{n}b")  # two megabytes before one tick
                await print_megabyte(foreign, f"{n}")
                for _ in range(20):
                    await asyncio.sleep(0)
                assert not pending.done(), "a thumbnail was sent without a tick"
                ticks.put_nowait(None)
                msg = await asyncio.wait_for(pending, 30)
                assert msg["event"] == "thumbs"
                updates = json.loads(msg["data"])["t"]
                who = [u[0] for u in updates]
                assert who.count(busy.id) == 1 and stranger.id not in who
                assert (idle.id in who) == (n == 0)  # sent once in full, then nothing while idle
                for update in updates:
                    assert len(json.dumps(update, ensure_ascii=False).encode()) <= UPDATE_MAX
                for attendee, lab, drop, keep, tail in updates:
                    assert lab == LAB
                    view[attendee] = view.get(attendee, [])[drop : drop + keep] + tail
                lines = view[busy.id]
                assert lines == [*map(str, range(23, 31)), f"mark-{n}b-42", "getting-started$"]
        finally:
            await stream.aclose()
            await ctx.terminals.close_all()

    asyncio.run(go())


def test_delta_sends_a_scroll_as_the_new_lines_only() -> None:
    old = ["a", "b", "c", "d"]
    assert delta(old, ["b", "c", "d", "e"]) == (1, 3, ["e"])
    assert delta(old, ["c", "d", "d2", "e"]) == (2, 2, ["d2", "e"])
    assert delta(old, ["x", "y"]) == (4, 0, ["x", "y"])
    assert delta([], ["x"]) == (0, 0, ["x"])
    for new in (["b", "c", "d", "e"], ["c", "d", "d2", "e"], ["x"], old):
        drop, keep, tail = delta(old, new)
        assert old[drop : drop + keep] + tail == new
