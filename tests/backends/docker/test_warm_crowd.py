"""A crowd claims a warm pool at once (real engine, a name prefix of its own): every attendee gets
a different ready container, no claim waits for a refill, and the pool refills
in the background once the claims have paused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labserver.backends.docker.backend import DockerBackend

pytestmark = pytest.mark.docker


def test_a_crowd_takes_distinct_warm_containers_and_the_refill_comes_after(
    docker_settings: Any, make_spec: Any
) -> None:
    backend = DockerBackend(docker_settings, prefix=f"bdw{make_spec.run}")
    pool = backend.warm_pool
    event = 7000 + int(make_spec.run[:3], 16)
    crowd = 5

    async def go() -> None:
        pool.configure(event, make_spec(event_id=event, labs=()), crowd)
        assert await pool.fill(event) == crowd
        phases: dict[str, list[str]] = {}

        def progress(env_id: str):  # type: ignore[no-untyped-def]
            async def say(phase: str, message: str) -> None:
                phases.setdefault(env_id, []).append(phase)

            return say

        specs = [make_spec(event_id=event, labs=()) for _ in range(crowd)]
        refs = await asyncio.gather(*(backend.create(s, progress(s.env_id)) for s in specs))
        assert len({r.infra_id for r in refs}) == crowd  # thirty claims, thirty containers
        assert all("claimed" in phases[s.env_id] and "creating" not in phases[s.env_id] for s in specs)
        assert pool.ready_count(event) == 0  # the room was served before any refill began
        await pool.settle()
        assert pool.ready_count(event) == crowd  # refilled in the background
        assert len(await pool.unclaimed(event)) == crowd
        assert await pool.drain(event) == crowd
        await asyncio.gather(*(backend.destroy(r) for r in refs))
        await backend.aclose()

    asyncio.run(go())
