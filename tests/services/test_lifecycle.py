"""Idle culling and warm pools as the housekeeping loop drives them, with the clock moved.
The backend is a subclass of the real local backend that records stop()/prepare_event() calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlmodel import Session

from labserver import clock
from labserver.app import create_app
from labserver.backends.base import EnvRef
from labserver.backends.local import LocalBackend
from labserver.config import DockerSettings, Settings
from labserver.models import Environment
from labserver.services.joining.events import create_event, join
from labserver.services.operations.lifecycle import warm_open_events
from labserver.services.provisioning.culling import cull_idle
from labserver.services.provisioning.environments import ensure_environment


class RecordingLocal(LocalBackend):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.stopped: list[str] = []
        self.prepared: list[tuple[int, int]] = []

    async def stop(self, ref: EnvRef) -> None:
        self.stopped.append(ref.env_id)

    async def prepare_event(self, event_id, template, size=None) -> int:  # type: ignore[no-untyped-def]
        self.prepared.append((event_id, len(template.labs)))
        return 2


def make(tmp_path: Path, **docker):  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path / "data", instructor_token="t", docker=DockerSettings(**docker))
    app = create_app(settings)
    ctx = app.state.ctx
    ctx.backend = RecordingLocal(settings)
    return ctx


def test_idle_environment_is_stopped_and_comes_back(tmp_path: Path) -> None:
    test_clock = clock.TestClock()
    previous = clock.use(test_clock)
    try:
        ctx = make(tmp_path, idle_cull_minutes=30)
        with Session(ctx.engine, expire_on_commit=False) as s:
            event = create_event(s, title="t", labs=["getting-started"], code="IDLE")
            ada, _, _ = join(s, event_code="IDLE", name="Ada")
            bob, _, _ = join(s, event_code="IDLE", name="Bob")

            async def scenario() -> None:
                ref_a = await ensure_environment(ctx, s, event=event, attendee=ada)
                await ensure_environment(ctx, s, event=event, attendee=bob)
                test_clock.advance(10 * 60)
                assert await cull_idle(ctx, s) == []  # not idle long enough
                # Bob has a terminal open: never culled
                term_key = (f"ev{event.id}-at{bob.id}", "getting-started")
                session = await ctx.terminals.get(
                    term_key,
                    lambda: ctx.backend.terminal(
                        EnvRef.from_json(s.get(Environment, term_key[0]).ref), 80, 24
                    ),
                )
                session.attach()
                test_clock.advance(25 * 60)
                assert await cull_idle(ctx, s) == [ref_a.env_id]
                assert ctx.backend.stopped == [ref_a.env_id]
                row = s.get(Environment, ref_a.env_id)
                s.refresh(row)
                assert row.state == "stopped" and row.reason == "idle"
                await ensure_environment(ctx, s, event=event, attendee=ada)  # the next visit
                s.refresh(row)
                assert row.state == "ready"
                await ctx.terminals.close_all()

            asyncio.run(scenario())
    finally:
        clock.use(previous)


def test_culling_is_off_by_default(tmp_path: Path) -> None:
    ctx = make(tmp_path)
    with Session(ctx.engine) as s:
        assert asyncio.run(cull_idle(ctx, s)) == []


def test_open_events_get_a_warm_pool(tmp_path: Path) -> None:
    ctx = make(tmp_path, warm_pool=2)
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="t", labs=["getting-started"], code="WARM")
        assert asyncio.run(warm_open_events(ctx)) == 2
    assert ctx.backend.prepared == [(event.id, 1)]
