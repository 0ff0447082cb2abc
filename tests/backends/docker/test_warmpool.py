"""Warm pool, idle culling on real containers (moved clock) and ``labserver env``. The pure idle
policy is tested in ``tests/services/test_culling.py``."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import docker
import pytest
from typer.testing import CliRunner

from labserver import clock
from labserver.backends.base import EnvState
from labserver.backends.docker.backend import DockerBackend
from labserver.clock import TestClock
from labserver.services.provisioning.culling import IdlePolicy, cull

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)


@pytest.mark.docker
def test_warm_pool_hands_out_ready_containers_and_refills(
    docker_backend: DockerBackend, make_spec: Any, docker_client: docker.DockerClient
) -> None:
    pool = docker_backend.warm_pool
    event = 9000 + int(make_spec.run[:4], 16)
    template = make_spec(event_id=event)
    pool.configure(event, template, size=2)
    phases: list[str] = []

    async def progress(phase: str, message: str) -> None:
        phases.append(phase)

    async def go() -> None:
        assert await pool.fill(event) == 2
        assert await pool.fill(event) == 0  # idempotent
        spec = make_spec(event_id=event)
        ref = await docker_backend.create(spec, progress)
        assert "claimed" in phases and "creating" not in phases
        assert ref.env_id == spec.env_id and ref.data["container"] == f"labserver-{spec.env_id}"
        assert await docker_backend.read_file(ref, "lab1/solution.py")  # seeded while warm
        await pool.settle()
        assert len(await pool.unclaimed(event)) == 2  # refilled in the background
        # a restarted server re-adopts the claimed container under the attendee's id
        again = DockerBackend(docker_backend.settings)
        found = [r for r in await again.discover() if r.env_id == spec.env_id]
        assert len(found) == 1 and found[0].infra_id == ref.infra_id
        assert not [r for r in await again.discover() if r.env_id.startswith("warm-")]
        await again.aclose()
        # an incompatible request (more memory than the warm ones have) gets a fresh container
        phases.clear()
        big = await docker_backend.create(make_spec(event_id=event, memory_mb=768))
        assert "claimed" not in phases and big.data["volume"] == f"labserver-ws-{big.env_id}"
        await docker_backend.destroy(ref)
        assert not docker_client.volumes.list(filters={"name": ref.data["volume"]})
        assert await pool.drain(event) == 2
        assert await pool.unclaimed(event) == []

    asyncio.run(go())


@pytest.mark.docker
def test_cull_stops_idle_environments_by_the_clock(docker_backend: DockerBackend, make_spec: Any) -> None:
    test_clock = TestClock(T0)
    previous = clock.use(test_clock)

    async def go() -> None:
        busy, idle = await docker_backend.create(make_spec()), await docker_backend.create(make_spec())
        activity = {busy.env_id: T0, idle.env_id: T0}
        policy = IdlePolicy(idle_minutes=20)
        assert await cull(docker_backend, [busy, idle], activity, policy) == []
        test_clock.advance(15 * 60)
        activity[busy.env_id] = clock.now()
        test_clock.advance(6 * 60)
        assert await cull(docker_backend, [busy, idle], activity, policy) == [idle.env_id]
        assert (await docker_backend.status(idle)).state == EnvState.stopped
        assert (await docker_backend.status(busy)).state == EnvState.ready
        back = await docker_backend.create(make_spec(env_id=idle.env_id))  # the attendee returns
        assert (await docker_backend.status(back)).state == EnvState.ready
        assert await docker_backend.read_file(back, "lab1/solution.py")

    try:
        asyncio.run(go())
    finally:
        clock.use(previous)


@pytest.mark.docker
def test_env_cli_lists_stops_and_reaps_orphans(
    tmp_path: Path, make_spec: Any, cpu_emu_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labserver.cli.env import app
    from labserver.config import Settings
    from labserver.db import make_engine, upgrade

    prefix = f"lscli{make_spec.run}"
    data = tmp_path / "data"
    monkeypatch.setenv("LABSERVER_DATA_DIR", str(data))
    monkeypatch.setenv("LABSERVER_BACKEND", "docker")
    monkeypatch.setenv("LABSERVER_DOCKER__IMAGE", cpu_emu_image)
    monkeypatch.setenv("LABSERVER_DOCKER__NAME_PREFIX", prefix)
    settings = Settings()
    backend = DockerBackend(settings)
    specs = [make_spec(), make_spec()]

    async def create() -> list[Any]:
        refs = [await backend.create(s) for s in specs]
        await backend.aclose()
        return refs

    refs = asyncio.run(create())
    runner = CliRunner()
    client = docker.from_env(version="auto")
    try:
        out = runner.invoke(app, ["list"])
        assert out.exit_code == 0, out.output
        assert specs[0].env_id in out.output and specs[1].env_id in out.output and "ready" in out.output
        out = runner.invoke(app, ["reap-orphans"])  # no database yet: refuses
        assert out.exit_code == 1 and "refusing" in out.output
        engine = make_engine(settings.sqlalchemy_url)
        upgrade(engine)
        engine.dispose()
        out = runner.invoke(app, ["stop", specs[0].env_id])
        assert out.exit_code == 0 and "stopped" in out.output
        assert client.containers.get(refs[0].infra_id).status == "exited"
        out = runner.invoke(app, ["list"])
        assert "ORPHAN" in out.output and "stopped" in out.output
        out = runner.invoke(app, ["reap-orphans", "--dry-run"])
        assert out.exit_code == 0 and "2 orphan(s) found" in out.output
        assert len(client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"})) == 2
        out = runner.invoke(app, ["reap-orphans"])
        assert out.exit_code == 0 and "2 orphan(s) reaped" in out.output, out.output
        assert client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}) == []
    finally:
        for c in client.containers.list(all=True, filters={"label": f"labserver.instance={prefix}"}):
            c.remove(force=True)
