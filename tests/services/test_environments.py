"""Environment rows: ``set_state`` enforces ``TRANSITIONS``; file operations and checks trust a
``ready`` row and ask the engine only when the backend says the environment is gone."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from sqlmodel import Session

from labserver.app import create_app
from labserver.backends.base import EnvRef, EnvState, EnvStatus, TransitionRefused
from labserver.backends.local import LocalBackend
from labserver.config import Settings
from labserver.models import Environment
from labserver.services.joining.events import create_event, join
from labserver.services.provisioning.environments import ensure_environment, set_state, with_environment


class CountingLocal(LocalBackend):
    """The real local backend, counting how often the server polls it."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.polls = 0

    async def status(self, ref: EnvRef) -> EnvStatus:
        self.polls += 1
        return await super().status(ref)


def make(tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path / "data", instructor_token="t")
    ctx = create_app(settings).state.ctx
    ctx.backend = CountingLocal(settings)
    return ctx


def test_set_state_refuses_a_transition_transitions_does_not_allow(tmp_path: Path) -> None:
    ctx = make(tmp_path)
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="t", labs=["getting-started"], code="STATE")
        ada, _, _ = join(s, event_code="STATE", name="Ada")
        asyncio.run(ensure_environment(ctx, s, event=event, attendee=ada))
        row = s.get(Environment, f"ev{event.id}-at{ada.id}")
        assert row is not None and row.state == EnvState.ready
        sub = ctx.live.subscribe(event.id or 0)
        with pytest.raises(TransitionRefused, match="ready -> pending"):
            set_state(ctx, s, row, EnvState.pending)
        s.refresh(row)
        assert row.state == EnvState.ready and sub.queue.empty()  # nothing stored, nothing published
        set_state(ctx, s, row, EnvState.ready, message="again")  # the same state: a new message is fine
        set_state(ctx, s, row, EnvState.failed, message="boom")  # anything may fail
        set_state(ctx, s, row, EnvState.provisioning)


def test_file_operations_trust_a_ready_row_and_recover_when_it_is_gone(tmp_path: Path) -> None:
    ctx = make(tmp_path)
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="t", labs=["getting-started"], code="TRUST")
        ada, _, _ = join(s, event_code="TRUST", name="Ada")

        async def scenario() -> None:
            ref = await ensure_environment(ctx, s, event=event, attendee=ada)
            polls = ctx.backend.polls

            async def read(r: EnvRef) -> bytes:
                return await ctx.backend.read_file(r, "getting-started/rmsnorm.py")

            for _ in range(3):
                assert await with_environment(ctx, s, event=event, attendee=ada, action=read)
            assert ctx.backend.polls == polls  # a ready row is trusted: no engine round trip
            shutil.rmtree(ref.infra_id)  # the workspace vanished behind the server's back
            assert await with_environment(ctx, s, event=event, attendee=ada, action=read)
            assert ctx.backend.polls == polls + 1  # asked once, re-provisioned, retried

        asyncio.run(scenario())


def test_a_check_polls_the_engine_at_most_once(tmp_path: Path) -> None:
    from labserver.services.grading.checking import run_check

    ctx = make(tmp_path)
    with Session(ctx.engine, expire_on_commit=False) as s:
        event = create_event(s, title="t", labs=["getting-started"], code="ONCE")
        ada, _, _ = join(s, event_code="ONCE", name="Ada")
        lab = ctx.catalog.labs["getting-started"]

        async def scenario() -> None:
            await ensure_environment(ctx, s, event=event, attendee=ada)
            polls = ctx.backend.polls
            run = await run_check(ctx, s, event=event, attendee=ada, lab=lab, step=lab.steps[0])
            assert run.status in ("passed", "failed")
            assert ctx.backend.polls - polls <= 1

        asyncio.run(scenario())
